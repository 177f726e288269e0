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

import fcntl
import hashlib
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from raftsched.addresses import is_loopback
from raftsched.api import tls
from raftsched.api.consistency import (
    APPLIED_TRAILER,
    CONSISTENCY_HEADER,
    LINEARIZABLE,
    MIN_INDEX_HEADER,
    RESET_TRAILER,
)
from raftsched.api.gen import (
    cluster_pb2,
    cluster_pb2_grpc,
    dag_pb2,
    dag_pb2_grpc,
    secret_pb2,
    secret_pb2_grpc,
    user_pb2,
    user_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from raftsched.errors import NoQuorumError, RaftschedError

log = logging.getLogger(__name__)

READ_ONLY = frozenset(
    {"GetStatus", "ListDags", "GetDag", "ListRuns", "ListTaskInstances", "GetTaskLog"}
    | {"ListImportErrors", "VerifyUser", "ListUsers"}
    | {"GetSecret", "ListSecrets", "ResolveSecrets"}
)

SEEN_INDEX_ENV = "RAFTSCHED_SEEN_INDEX_FILE"
SEEN_FILE_PREFIX = "seen-index-"
MAX_SEEN_FILES = 32
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


class SeenIndex:
    """The highest Raft log index a caller has seen (read) or caused (written). Thread-safe.

    ``load``/``save`` keep it in a small file, so separate processes of one caller (CLI
    invocations) share it."""

    def __init__(self, value: int = 0) -> None:
        self._lock = threading.Lock()
        self._value = max(0, int(value))
        self._was_reset = False

    @property
    def value(self) -> int:
        with self._lock:
            return self._value

    def observe(self, index: int) -> None:
        with self._lock:
            self._value = max(self._value, int(index))

    def reset(self, index: int, sent: int) -> None:
        """A leader served ``sent`` although its whole log is shorter: the cluster was
        re-created; start again from ``index`` unless a newer answer came meanwhile."""
        with self._lock:
            if self._value <= sent:
                self._value = int(index)
                self._was_reset = True

    @classmethod
    def load(cls, path: Path) -> SeenIndex:
        try:
            return cls(int(path.read_text().strip() or 0))
        except (OSError, ValueError):
            return cls()

    def save(self, path: Path) -> None:
        """Best effort: a caller that cannot write it only loses what it saw before."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Under a lock, and never lower than what the file holds: two CLI commands run at
            # once must not make the slower one's save undo the faster one's newer index
            # (unless this caller saw the cluster re-created).
            with open(path.with_name(f"{path.name}.lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                value = self.value
                if not self._was_reset:
                    value = max(value, SeenIndex.load(path).value)
                tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}")
                tmp.write_text(f"{value}\n")
                tmp.replace(path)
            if path.name.startswith(SEEN_FILE_PREFIX):
                _prune_seen_files(path.parent)
        except OSError as err:
            log.debug("cannot save the seen index to %s: %s", path, err)

    def __repr__(self) -> str:
        return f"SeenIndex({self.value})"


def seen_index_path(servers: Sequence[str], env: Mapping[str, str] | None = None) -> Path | None:
    """Where one user's CLI keeps the index it has seen of the cluster at ``servers``:
    ``$RAFTSCHED_SEEN_INDEX_FILE`` (empty: nowhere), else a file per server list under
    ``$XDG_STATE_HOME/raftsched`` (default ``~/.local/state/raftsched``)."""
    env = os.environ if env is None else env
    if SEEN_INDEX_ENV in env:
        return Path(env[SEEN_INDEX_ENV]) if env[SEEN_INDEX_ENV] else None
    base = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    key = hashlib.sha256(",".join(sorted(servers)).encode()).hexdigest()[:16]
    return base / "raftsched" / f"{SEEN_FILE_PREFIX}{key}"


def _prune_seen_files(folder: Path) -> None:
    """Keep the MAX_SEEN_FILES most recently used clusters' files (tests make many)."""
    files = sorted(folder.glob(f"{SEEN_FILE_PREFIX}*"), key=lambda p: p.stat().st_mtime)
    for old in files[:-MAX_SEEN_FILES]:
        old.unlink(missing_ok=True)


class ApiError(RaftschedError):
    """A call failed with a gRPC status other than "every node unavailable".

    ``code`` is the ``grpc.StatusCode``; ``message`` the server's (actionable) message;
    ``address`` the node that answered; ``method`` the RPC's name.
    """

    def __init__(
        self, code: grpc.StatusCode, message: str, *, address: str = "", method: str = ""
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.address = address
        self.method = method


@dataclass(frozen=True)
class _Rpc:
    service: str  # "ClusterService"
    name: str  # "GetStatus"
    streaming: bool

    @property
    def read_only(self) -> bool:
        return self.name in READ_ONLY


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
                rounds = tried // len(servers)
                cap = min(client._max_backoff, client._backoff * 2 ** (rounds - 1))
                time.sleep(min(random.uniform(0, cap), remaining))
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


@dataclass(frozen=True)
class _View:
    """One call's consistency: the trackers it reads and feeds, and the mode asked for."""

    trackers: tuple[SeenIndex, ...]
    consistency: str

    def floor(self) -> int:
        return max((t.value for t in self.trackers), default=0)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        out: tuple[tuple[str, str], ...] = ()
        floor = self.floor()
        if floor:
            out += ((MIN_INDEX_HEADER, str(floor)),)
        if self.consistency:
            out += ((CONSISTENCY_HEADER, self.consistency),)
        return out

    def answered(self, sent: int, index: int, trailer: Sequence[Any] | None) -> None:
        """Remember the answer's index (the larger of its freshness and its trailer)."""
        reset = False
        for key, value in trailer or ():
            if key == APPLIED_TRAILER and str(value).isdigit():
                index = max(index, int(value))
            elif key == RESET_TRAILER:
                reset = True
        for tracker in self.trackers:
            if reset:
                tracker.reset(index, sent)
            else:
                tracker.observe(index)


def _check_consistency(value: str) -> str:
    value = (value or "").strip().lower()
    if value not in ("", LINEARIZABLE):
        raise ValueError(f"consistency = {value!r}: expected '' or {LINEARIZABLE!r}")
    return value


def _freshness_index(response: Message) -> int:
    if "freshness" in type(response).DESCRIPTOR.fields_by_name and response.HasField("freshness"):
        return int(response.freshness.applied_index)  # type: ignore[attr-defined]
    return 0


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
}


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
