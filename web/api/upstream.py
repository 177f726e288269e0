"""How a REST call reaches the cluster: as its caller, through the pages' gateway.

:class:`ApiGateway` is the pages' :class:`~raftsched.web.gateway.Gateway` (same calls, same
dicts, same errors) with two differences in its one choke point, ``_call``:

- identity: its gRPC client holds **no** token of its own; every call carries the REST
  caller's bearer token, so the node's token table decides who may do what (viewer reads,
  operator also writes), exactly as for ``grpcurl`` or the CLI. The webserver's own admin
  token never serves ``/api/v1``;
- consistency: instead of the session cookie, the index the caller has seen comes from the
  ``X-Raftsched-Min-Index`` request header, and the index the answer reflects goes back in
  ``X-Raftsched-Applied-Index`` (README "Consistency"): a REST client that echoes it gets
  read-your-writes and monotonic reads whichever webserver and node answer.
  ``X-Raftsched-Consistency: linearizable`` asks a read for a read-index round trip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flask import Flask, current_app, g
from google.protobuf.message import Message
from raftsched.web import metrics
from raftsched.web.gateway import EXTENSION as PAGES_EXTENSION
from raftsched.web.gateway import Gateway, Unavailable, _translate, read_cache_seconds
from raftsched.web.read_cache import data_index

from raftsched.api.client import READ_ONLY, SeenIndex
from raftsched.api.consistency import LINEARIZABLE
from raftsched.core.limits import MAX_JSON_INT
from raftsched.errors import ApiError, NoQuorumError

EXTENSION = "raftsched_api_gateway"
MIN_INDEX_HEADER = "X-Raftsched-Min-Index"
APPLIED_INDEX_HEADER = "X-Raftsched-Applied-Index"
CONSISTENCY_HEADER = "X-Raftsched-Consistency"


@dataclass
class Caller:
    """One REST request's identity and consistency view."""

    token: str
    seen: SeenIndex = field(default_factory=SeenIndex)
    consistency: str = ""

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)


class ApiGateway(Gateway):
    """The pages' gateway, calling as the REST caller (see the module docstring)."""

    def _call(self, service: str, method: str, request: Message, **kwargs: Any) -> Any:
        caller: Caller = g.api_caller
        # Reused read answers are per token (the cluster decides what a token may read) and
        # never for a linearizable read (read_cache.py).
        key = (
            None if kwargs or caller.consistency else self.cache.key(method, request, caller.token)
        )
        hit = self.cache.get(key, caller.seen.value)
        # What each answer's data index was (0: not a cacheable read): the route's whole JSON
        # body may be reused only when every call behind it was (blueprint.py, remember_body).
        indexes: list[int] = g.setdefault("api_data_indexes", [])
        if hit is not None:
            indexes.append(hit[0])
            caller.seen.observe(hit[0])
            return hit[1]
        kwargs.setdefault("metadata", caller.metadata)
        if caller.consistency and method in READ_ONLY:
            kwargs.setdefault("consistency", caller.consistency)
        try:
            response = getattr(getattr(self.client, service), method)(
                request, seen=caller.seen, **kwargs
            )
        except NoQuorumError as err:
            metrics.upstream_error(method, "UNAVAILABLE")
            raise Unavailable(str(err), "UNAVAILABLE") from None
        except ApiError as err:
            raise _translate(err, method) from None
        finally:
            self.cache.after_call(method)  # a write (even a failed one) empties the cache
        self.cache.put(key, response)
        indexes.append(data_index(response) if key is not None else 0)
        return response


def parse_min_index(value: str | None) -> int:
    """The ``X-Raftsched-Min-Index`` header: a non-negative integer; ValueError otherwise."""
    if value is None or not value.strip():
        return 0
    text = value.strip()
    digits = len(str(MAX_JSON_INT))  # checked before int(): a 5,000-digit header is no index
    if not (text.isascii() and text.isdigit()) or len(text) > digits or int(text) > MAX_JSON_INT:
        raise ValueError(
            f"{MIN_INDEX_HEADER} = {text[:40]!r}: expected a non-negative integer, the"
            f" highest {APPLIED_INDEX_HEADER} this client has seen"
        )
    return int(text)


def parse_consistency(value: str | None) -> str:
    text = (value or "").strip().lower()
    if text not in ("", LINEARIZABLE):
        raise ValueError(f"{CONSISTENCY_HEADER} = {text[:40]!r}: expected {LINEARIZABLE!r}")
    return text


def init_app(app: Flask) -> None:
    if EXTENSION in app.extensions:
        return
    gateway = ApiGateway(
        app.config["RAFTSCHED_SERVERS"],
        token=None,  # never the webserver's own token: each call carries its caller's
        tls_ca=app.config.get("RAFTSCHED_TLS_CA"),
        deadline=float(app.config.get("RAFTSCHED_DEADLINE", 5.0)),
        cache_ttl=read_cache_seconds(app),
    )
    pages = app.extensions.get(PAGES_EXTENSION)
    if pages is not None:  # one cache: a write through either empties it for both
        gateway.cache = pages.cache
    app.extensions[EXTENSION] = gateway


def api_gateway() -> ApiGateway:
    return current_app.extensions[EXTENSION]
