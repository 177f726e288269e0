"""The ``/api/v1`` blueprint and what every request goes through before and after its route.

Before: the body size and type, the bearer token (forwarded to the cluster, see
``upstream.py``), the caller's consistency headers, and a GET answered again from the read
cache when it may be. After: the body kept for that cache and the applied index stamped on
the answer. Also the helpers the routes share: documented error answers (:func:`errors`),
paging of lists the cluster answers whole (:func:`paginate`) and :func:`run_out`. The routes
are in ``routes.py``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Response, current_app, g, request
from flask_smorest import Blueprint as SmorestBlueprint
from raftsched.web.api import body as json_body
from raftsched.web.api import schemas as s
from raftsched.web.api.errors import ApiProblem, register
from raftsched.web.api.upstream import (
    APPLIED_INDEX_HEADER,
    CONSISTENCY_HEADER,
    MIN_INDEX_HEADER,
    Caller,
    api_gateway,
    parse_consistency,
    parse_min_index,
)
from webargs import core as webargs_core
from webargs.flaskparser import FlaskParser, is_json_request

from raftsched.api.client import SeenIndex

F = TypeVar("F", bound=Callable[..., Any])


class _Parser(FlaskParser):
    DEFAULT_VALIDATION_STATUS = 400  # an invalid field is a 400 INVALID_ARGUMENT, as from gRPC

    def _raw_load_json(self, req: Any) -> Any:
        """webargs' own, with every number bounded before Python builds it (``body.py``)."""
        if not is_json_request(req):
            return webargs_core.missing
        data = req.get_data(cache=True)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:  # webargs answers a JSONDecodeError with a 400
            raise json.JSONDecodeError(f"not UTF-8: {exc.reason}", str(data), exc.start) from exc
        return json_body.loads(text)


class Blueprint(SmorestBlueprint):
    ARGUMENTS_PARSER = _Parser()


bp = Blueprint(
    "api_v1",
    __name__,
    url_prefix="/api/v1",
    description="raftsched REST API: DAGs, runs, task instances, logs, cluster",
)
register(bp)

PUBLIC_ENDPOINTS = frozenset({"api_v1.health", "api_v1.docs", "api_v1.unknown_route"})
MAX_BODY_BYTES = 1024 * 1024
_TOKEN = re.compile(r"^[\x21-\x7e]{1,4096}$")  # what gRPC metadata can carry
TOKEN_HELP = (
    "send 'Authorization: Bearer <token>' with a token of the cluster's [api] viewer_tokens,"
    " operator_tokens or admin_tokens"
)

_ERRORS = {
    400: "invalid request: the field is named in `field`",
    401: "no or unknown bearer token",
    403: "the token's role may not do this",
    404: "no such DAG, run or task",
    409: "refused in the current state (e.g. the run id exists)",
    503: "no scheduler node could answer: retry",
}


def errors(*statuses: int) -> Callable[[F], F]:
    """Document JSON error answers (the Error schema) of an operation."""

    def decorate(view: F) -> F:
        for status in (401, 503, *statuses):
            view = bp.alt_response(status, schema=s.ApiError, description=_ERRORS[status])(view)
        return view

    return decorate


# -- every request -----------------------------------------------------------------------------


@bp.before_request
def authenticate() -> None:
    if (request.content_length or 0) > MAX_BODY_BYTES:
        raise ApiProblem("PAYLOAD_TOO_LARGE", f"the body is over {MAX_BODY_BYTES} bytes")
    if request.endpoint in PUBLIC_ENDPOINTS:
        return
    if request.method == "POST" and request.content_length and not request.is_json:
        raise ApiProblem(
            "UNSUPPORTED_MEDIA_TYPE",
            f"the body is {request.mimetype or 'untyped'}: send JSON (Content-Type:"
            " application/json)",
        )
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiProblem("UNAUTHENTICATED", f"missing bearer token: {TOKEN_HELP}")
    if not _TOKEN.match(token):
        raise ApiProblem("UNAUTHENTICATED", f"malformed bearer token: {TOKEN_HELP}")
    try:
        seen = parse_min_index(request.headers.get(MIN_INDEX_HEADER))
    except ValueError as err:
        raise ApiProblem("INVALID_ARGUMENT", str(err), field=MIN_INDEX_HEADER) from None
    try:
        consistency = parse_consistency(request.headers.get(CONSISTENCY_HEADER))
    except ValueError as err:
        raise ApiProblem("INVALID_ARGUMENT", str(err), field=CONSISTENCY_HEADER) from None
    g.api_caller = Caller(token, SeenIndex(seen), consistency)
    return reused_body()


def _body_key() -> tuple[str, str, str] | None:
    """A GET's key in the read cache (web/read_cache.py): token and path with query."""
    caller: Caller | None = g.get("api_caller")
    if request.method != "GET" or caller is None or caller.consistency:
        return None
    return ("REST", caller.token, request.full_path)


def reused_body() -> Response | None:
    """The JSON body this token got for this GET a moment ago, when its data is at least at
    the caller's X-Raftsched-Min-Index (read_cache.py); None: ask the cluster."""
    key = _body_key()
    if key is None:
        return None
    hit = api_gateway().cache.get(key, g.api_caller.seen.value)
    if hit is None:
        return None
    index, body = hit
    g.api_caller.seen.observe(index)
    return current_app.response_class(body, status=200, mimetype="application/json")


def remember_body(response: Response) -> None:
    indexes = g.get("api_data_indexes") or [0]
    key = _body_key()
    if key is None or response.status_code != 200 or response.is_streamed or min(indexes) <= 0:
        return
    if response.mimetype == "application/json":
        api_gateway().cache.put_value(key, min(indexes), response.get_data())


@bp.after_request
def stamp(response: Response) -> Response:
    remember_body(response)
    caller: Caller | None = g.get("api_caller")
    if caller is not None and caller.seen.value:
        response.headers[APPLIED_INDEX_HEADER] = str(caller.seen.value)
    response.headers.setdefault("Cache-Control", "no-store")
    return response


# -- helpers -----------------------------------------------------------------------------------


def run_out(run: dict[str, Any]) -> dict[str, Any]:
    """A gateway run dict with its conf as an object, not JSON text."""
    out = dict(run)
    try:
        out["conf"] = json.loads(run.get("conf_json") or "{}")
    except ValueError:
        out["conf"] = {}
    return out


def _offset(token: str) -> int:
    if not token:
        return 0
    try:
        kind, _, value = base64.urlsafe_b64decode(token.encode() + b"==").decode().partition(":")
        if kind != "o" or not value.isdigit():
            raise ValueError(token)
        return int(value)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiProblem(
            "INVALID_ARGUMENT",
            "page_token: not a token this API gave out; pass next_page_token as it came",
            field="page_token",
        ) from None


def paginate(items: list[Any], page_size: int, page_token: str) -> tuple[list[Any], str]:
    """A page of a list the cluster answers whole, with an opaque offset token."""
    start = _offset(page_token)
    page = items[start : start + page_size]
    end = start + len(page)
    token = base64.urlsafe_b64encode(f"o:{end}".encode()).decode().rstrip("=")
    return page, token if end < len(items) else ""
