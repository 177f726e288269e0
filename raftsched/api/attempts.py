"""One call's attempts: which node to try next, when to retry, and what error to raise.

The retry policy of :class:`~raftsched.api.client.RaftschedClient` (its module docstring says
why): ``_Attempts`` walks the servers round-robin from the last good one until the deadline,
with exponential backoff and full jitter after each round; ``_Attempts.failed`` decides whether
a failure may be retried (reads and requests with a ``request_id`` are idempotent);
``_Attempts.give_up`` raises :class:`~raftsched.errors.NoQuorumError` when every attempt met
UNAVAILABLE, else :class:`ApiError`. Re-exported by :mod:`raftsched.api.client`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from google.protobuf.message import Message

from raftsched import retry
from raftsched.errors import ApiError, NoQuorumError

if TYPE_CHECKING:
    from raftsched.api.client import RaftschedClient

READ_ONLY = frozenset(
    {"GetStatus", "ListDags", "GetDag", "ListRuns", "ListTaskInstances", "GetTaskLog"}
    | {"ListImportErrors", "ExplainSlot", "VerifyUser", "GetPasswordHash", "ListUsers"}
    | {"GetDagSource", "GetSecret", "ListSecrets", "ResolveSecrets", "ListWorkers"}
    | {"ListAssets", "GetAsset"}
    | {"ExternalRunState"}
)

# A retry needs this long at least: a node without a leader answers UNAVAILABLE only after
# waiting a little for an election (see api/servicers/context.py).
MIN_RETRY_SECONDS = 0.5
# Words in an UNAVAILABLE status that gRPC uses when the call never reached a server.
_CONNECT_FAILURES = (
    "failed to connect",
    "connection refused",
    "connections to all backends failing",
    "dns resolution failed",
    "name resolution",
)


MAX_DEADLINE = 86_400.0  # seconds


@dataclass(frozen=True)
class _Rpc:
    service: str  # "ClusterService"
    name: str  # "GetStatus"
    streaming: bool

    @property
    def read_only(self) -> bool:
        return self.name in READ_ONLY


class _Attempts:
    """The addresses to try for one call, round-robin from the last good one, until the
    deadline; sleeps with backoff and jitter after each full round. Records each failure."""

    def __init__(
        self, client: RaftschedClient, deadline_at: float, start: int | None = None
    ) -> None:
        self.client = client
        self.deadline_at = deadline_at
        self.start = start
        self.errors: dict[str, str] = {}
        self.all_unavailable = True
        self.last: ApiError | None = None

    def __iter__(self) -> Iterator[tuple[int, str, float]]:
        client = self.client
        servers = client.servers
        start = client._good if self.start is None else self.start
        tried = 0
        while True:
            remaining = self.deadline_at - time.monotonic()
            if remaining <= 0:
                return
            if tried and tried % len(servers) == 0:
                pause = retry.backoff(
                    tried // len(servers),  # full rounds so far
                    initial=client._backoff,
                    maximum=client._max_backoff,
                    jitter=True,
                )
                time.sleep(min(pause, remaining))
                remaining = self.deadline_at - time.monotonic()
            if tried and remaining < MIN_RETRY_SECONDS:
                # Too little time for a node to answer (even "no quorum"): a last attempt
                # would only end in DEADLINE_EXCEEDED and hide what the earlier ones said.
                return
            index = (start + tried) % len(servers)
            tried += 1
            per = remaining if client.attempt_timeout is None else client.attempt_timeout
            yield index, servers[index], min(remaining, per)

    def failed(self, address: str, err: grpc.RpcError, rpc: _Rpc, idempotent: bool) -> None:
        """Record a failed attempt; raise if it must not be retried."""
        code, details = err.code(), err.details() or ""
        error = _api_error(err, address, rpc)
        self.errors[address] = f"{code.name}: {details}"
        self.last = error
        if code is grpc.StatusCode.UNAVAILABLE:
            if idempotent or any(word in details.lower() for word in _CONNECT_FAILURES):
                return
        elif code is grpc.StatusCode.DEADLINE_EXCEEDED:
            self.all_unavailable = False
            if idempotent and self.deadline_at - time.monotonic() > 0:
                return  # only this attempt's cap ran out: try the next node
        raise error

    def give_up(self, rpc: _Rpc) -> Exception:
        if not self.errors:
            return ApiError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "deadline passed before any attempt",
                method=rpc.name,
            )
        if self.all_unavailable:
            tried = "; ".join(f"{addr} ({error})" for addr, error in self.errors.items())
            return NoQuorumError(
                f"no raftsched node could serve {rpc.name}: tried {tried}; check that the"
                " nodes run and --server lists them, or `raftsched cluster status`"
            )
        assert self.last is not None
        return self.last


def _prepare(rpc: _Rpc, request: Message) -> bool:
    """Fill an empty request_id; return whether the call may be retried after it was sent."""
    if rpc.read_only:
        return True
    if "request_id" in type(request).DESCRIPTOR.fields_by_name:
        if not request.request_id:  # type: ignore[attr-defined]
            request.request_id = uuid.uuid4().hex  # type: ignore[attr-defined]
        return True
    return False


def _copy(request: Message) -> Message:
    copy = type(request)()
    copy.CopyFrom(request)
    return copy


def _api_error(err: grpc.RpcError, address: str, rpc: _Rpc) -> ApiError:
    code, details = err.code(), err.details() or ""
    if code is grpc.StatusCode.DEADLINE_EXCEEDED and details == "Deadline Exceeded":
        details = (
            f"{address} did not answer {rpc.name} before the call's deadline; retry with a"
            " longer timeout, or check `raftsched cluster status`"
        )
    return ApiError(code, details, address=address, method=rpc.name)
