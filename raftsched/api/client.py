"""``RaftschedClient``: the one way the CLI, the web and workers reach the cluster.

    with RaftschedClient(["10.0.0.1:50051", "10.0.0.2:50051"], token=tok) as client:
        status = client.cluster.GetStatus(cluster_pb2.GetStatusRequest())
        client.dags.PauseDag(dag_pb2.PauseDagRequest(dag_id="etl"))
        for chunk in client.dags.GetTaskLog(dag_pb2.GetTaskLogRequest(..., follow=True)):
            ...

``client.cluster``, ``client.dags`` and ``client.workers`` have one method per RPC of
ClusterService, DagService and WorkerService, named as in the proto, taking the request
message and optional ``timeout=`` (seconds for the whole call, retries included; default the
client's ``deadline``) and ``metadata=``.

Failover and retries. Any node accepts any call, so a call goes to the last node that
answered, and on failure to the next one (round-robin). UNAVAILABLE (no connection, node
down, no quorum, not leader) is retried on the next node, with exponential backoff and full
jitter after each round of all nodes, until the call's deadline. When every attempt met
UNAVAILABLE the call raises :class:`~raftsched.errors.NoQuorumError` listing each address and
its last error (the CLI's exit code 3); any other failure raises :class:`ApiError`.

Idempotency. Reads (Get*/List*) are always safe to retry. A mutating request is retried only
when it carries a ``request_id``: the server applies a request id once and answers a repeat
with the first result. The client fills an empty ``request_id`` with a fresh UUID before the
first attempt, so every raftsched write is retried safely, and the caller may set its own to
retry across processes. A mutating call *without* a request id (none exists in raftsched.v1
today) is never retried after DEADLINE_EXCEEDED or a server-side UNAVAILABLE (it may have been
applied), only after a connection failure that kept it from reaching any server.

Streams (GetTaskLog) fail over before their first message; after it, they resume on another
node with ``after_seq`` = the last ``seq`` received, so no chunk is lost or repeated. A
followed log (``follow=True``) has no overall deadline unless ``timeout=`` is given.

Consistency (README "Consistency"). Every answer carries the applied index it reflects
(``freshness.applied_index`` and the trailer ``x-raftsched-applied-index``). The client keeps
the highest index it has seen or caused in a :class:`SeenIndex` and sends it with every call
(``x-raftsched-min-index``); a node that has not applied that far waits briefly, else answers
UNAVAILABLE and the call moves to the next node. So one client never reads from behind what
it has seen: read-your-writes and monotonic reads, across nodes. ``seen=`` adds a caller's
own tracker for one call (the web keeps one per user session, in the signed cookie), and
``consistency="linearizable"`` (per call, or the client's default for reads) makes the node
do a read-index round trip through the leader first. ``track_index=False`` turns the
client's own tracking off (tests measure the anomalies it prevents).

Thread-safe: one client may serve every thread of a process (gRPC channels multiplex).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from raftsched.addresses import is_loopback
from raftsched.api import tls
from raftsched.api.attempts import (
    MAX_DEADLINE,
    MIN_RETRY_SECONDS,
    READ_ONLY,
    _api_error,
    _Attempts,
    _copy,
    _prepare,
    _Rpc,
)
from raftsched.api.gen import (
    asset_pb2,
    asset_pb2_grpc,
    cluster_pb2,
    cluster_pb2_grpc,
    dag_pb2,
    dag_pb2_grpc,
    pool_pb2,
    pool_pb2_grpc,
    secret_pb2,
    secret_pb2_grpc,
    user_pb2,
    user_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from raftsched.api.seen_index import (  # re-exported: the client's public names
    MAX_SEEN_FILES,
    SEEN_FILE_PREFIX,
    SEEN_INDEX_ENV,
    SeenIndex,
    _check_consistency,
    _freshness_index,
    _View,
    seen_index_path,
)
from raftsched.errors import ApiError

__all__ = [
    "MAX_DEADLINE",
    "MAX_SEEN_FILES",
    "MIN_RETRY_SECONDS",
    "READ_ONLY",
    "SEEN_FILE_PREFIX",
    "SEEN_INDEX_ENV",
    "ApiError",
    "RaftschedClient",
    "SeenIndex",
    "seen_index_path",
]

log = logging.getLogger(__name__)


class RaftschedClient:
    """A client of a raftsched cluster; see the module docstring.

    ``servers``: "host:port" addresses of the nodes' gRPC APIs (a comma-separated string is
    split). ``token``: bearer token sent with every call. ``tls_ca``: PEM file of the CA that
    signed the servers' certificates; setting it (or ``tls_enabled=True``, for the system
    roots) turns TLS on. ``deadline``: default seconds per call, retries included.
    ``attempt_timeout``: if set, cap each attempt at this many seconds, so a node that
    swallows packets (a partition) costs at most that before the next node is tried; leave it
    above any long-poll's wait. ``track_index``, ``seen``, ``consistency``: see the module
    docstring (defaults: this client's own tracker; reads as fresh as what it has seen).
    """

    def __init__(
        self,
        servers: Sequence[str] | str,
        *,
        token: str | None = None,
        tls_ca: str | Path | None = None,
        tls_enabled: bool | None = None,
        deadline: float = 10.0,
        attempt_timeout: float | None = None,
        max_message_bytes: int = 4 * 1024 * 1024,
        backoff: float = 0.05,
        max_backoff: float = 1.0,
        track_index: bool = True,
        seen: SeenIndex | None = None,
        consistency: str = "",
    ) -> None:
        if isinstance(servers, str):
            servers = servers.split(",")
        self.servers = tuple(s.strip() for s in servers if s.strip())
        if not self.servers:
            raise ValueError(
                "no server address: pass --server host:port[,host:port...] or set RAFTSCHED_SERVER"
            )
        if deadline <= 0:
            raise ValueError(f"deadline = {deadline!r}: expected seconds > 0")
        # gRPC turns a deadline of about 1e10 s or more into DEADLINE_EXCEEDED at once, which
        # the failover loop would retry for ever: no call waits longer than a day
        self.deadline = min(deadline, MAX_DEADLINE) if deadline == deadline else MAX_DEADLINE
        self.attempt_timeout = attempt_timeout
        self.track_index = track_index
        self.seen = seen if seen is not None else SeenIndex()
        self.consistency = _check_consistency(consistency)
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        secure = tls_enabled if tls_enabled is not None else tls_ca is not None
        self._credentials = tls.channel_credentials(tls_ca) if secure else None
        if token and not secure and not all(is_loopback(s) for s in self.servers):
            log.warning("sending an API token without TLS to a non-loopback server")
        self._options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            # A restarted node is usable again within ~1 s, not gRPC's default of up to 120 s.
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 1_000),
        ]
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[tuple[str, str], Any] = {}
        self._good = 0  # index of the last server that answered
        self._closed = False
        self.cluster = _Service(self, cluster_pb2, "ClusterService")
        self.dags = _Service(self, dag_pb2, "DagService")
        self.workers = _Service(self, worker_pb2, "WorkerService")
        self.users = _Service(self, user_pb2, "UserService")
        self.secrets = _Service(self, secret_pb2, "SecretService")
        self.pools = _Service(self, pool_pb2, "PoolService")
        self.assets = _Service(self, asset_pb2, "AssetService")

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            channel.close()

    def __enter__(self) -> RaftschedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RaftschedClient({list(self.servers)!r})"  # never the token

    # -- plumbing ----------------------------------------------------------------------------

    def _stub(self, address: str, service: str) -> Any:
        with self._lock:
            if self._closed:
                raise RuntimeError("RaftschedClient is closed")
            stub = self._stubs.get((address, service))
            if stub is None:
                channel = self._channels.get(address)
                if channel is None:
                    if self._credentials is not None:
                        channel = grpc.secure_channel(address, self._credentials, self._options)
                    else:
                        channel = grpc.insecure_channel(address, self._options)
                    self._channels[address] = channel
                stub = _STUB_CLASSES[service](channel)
                self._stubs[(address, service)] = stub
            return stub

    def _mark_good(self, index: int) -> None:
        with self._lock:
            self._good = index

    def _metadata_for(
        self, extra: Sequence[tuple[str, str]] | None, view: _View | None = None
    ) -> tuple[Any, ...]:
        return self._metadata + tuple(extra or ()) + (view.metadata() if view else ())

    def _view(self, rpc: _Rpc, seen: SeenIndex | None, consistency: str | None) -> _View:
        trackers = tuple(t for t in (self.seen if self.track_index else None, seen) if t)
        if consistency is None:
            consistency = self.consistency if rpc.read_only else ""
        return _View(trackers, _check_consistency(consistency))

    def call(
        self,
        rpc: _Rpc,
        request: Message,
        *,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
        seen: SeenIndex | None = None,
        consistency: str | None = None,
    ) -> Any:
        """One unary call with failover and retries (what ``client.dags.X(...)`` runs)."""
        idempotent = _prepare(rpc, request)
        view = self._view(rpc, seen, consistency)
        attempts = _Attempts(self, time.monotonic() + min(timeout or self.deadline, MAX_DEADLINE))
        for index, address, per_attempt in attempts:
            method = getattr(self._stub(address, rpc.service), rpc.name)
            sent = view.floor()
            try:
                response, call = method.with_call(
                    request, timeout=per_attempt, metadata=self._metadata_for(metadata, view)
                )
            except grpc.RpcError as err:
                attempts.failed(address, err, rpc, idempotent)
                continue
            self._mark_good(index)
            view.answered(sent, _freshness_index(response), call.trailing_metadata())
            return response
        raise attempts.give_up(rpc)

    def stream(
        self,
        rpc: _Rpc,
        request: Message,
        *,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
        seen: SeenIndex | None = None,
        consistency: str | None = None,
    ) -> Iterator[Any]:
        """A server-streaming call with failover; resumes by ``after_seq`` when it can."""
        _prepare(rpc, request)
        view = self._view(rpc, seen, consistency)
        if timeout is None and not getattr(request, "follow", False):
            timeout = self.deadline
        end = None if timeout is None else time.monotonic() + min(timeout, MAX_DEADLINE)
        resumable = "after_seq" in type(request).DESCRIPTOR.fields_by_name
        request = _copy(request)
        start = None
        while True:
            budget = time.monotonic() + self.deadline
            attempts = _Attempts(self, budget if end is None else min(budget, end), start)
            for index, address, _ in attempts:
                # The stream's own deadline, not the attempt cap: a log may flow for long.
                per_attempt = None if end is None else max(0.001, end - time.monotonic())
                method = getattr(self._stub(address, rpc.service), rpc.name)
                progressed = False
                sent = view.floor()
                try:
                    call = method(
                        request, timeout=per_attempt, metadata=self._metadata_for(metadata, view)
                    )
                    for item in call:
                        if not progressed:
                            progressed = True
                            self._mark_good(index)
                        if resumable:
                            request.after_seq = item.seq  # type: ignore[attr-defined]
                        yield item
                    view.answered(sent, 0, call.trailing_metadata())
                    return
                except grpc.RpcError as err:
                    if progressed and not resumable:
                        raise _api_error(err, address, rpc) from None
                    attempts.failed(address, err, rpc, idempotent=True)
                    if progressed:
                        start = index + 1  # resume on the next node, with a fresh budget
                        break
            else:
                raise attempts.give_up(rpc)


class _Service:
    """One method per RPC of a service, built from its descriptor."""

    def __init__(self, client: RaftschedClient, module: Any, name: str) -> None:
        self._name = name
        descriptor = module.DESCRIPTOR.services_by_name[name]
        for method in descriptor.methods:
            rpc = _Rpc(name, method.name, method.server_streaming)
            setattr(self, method.name, _bind(client, rpc))

    def __repr__(self) -> str:
        return f"<{self._name} client>"


def _bind(client: RaftschedClient, rpc: _Rpc) -> Callable[..., Any]:
    run = client.stream if rpc.streaming else client.call

    def method(request: Message, **kwargs: Any) -> Any:
        return run(rpc, request, **kwargs)

    method.__name__ = method.__qualname__ = rpc.name
    return method


_STUB_CLASSES: dict[str, Callable[[grpc.Channel], Any]] = {
    "ClusterService": cluster_pb2_grpc.ClusterServiceStub,
    "DagService": dag_pb2_grpc.DagServiceStub,
    "WorkerService": worker_pb2_grpc.WorkerServiceStub,
    "UserService": user_pb2_grpc.UserServiceStub,
    "SecretService": secret_pb2_grpc.SecretServiceStub,
    "PoolService": pool_pb2_grpc.PoolServiceStub,
    "AssetService": asset_pb2_grpc.AssetServiceStub,
}
