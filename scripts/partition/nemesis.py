"""Faults ("nemeses"): each a named fault with ``start`` and ``stop`` (heal), composable.

The nodes come from a ``Cluster`` (the protocol below; ``scripts/partition/cluster.py`` is
the real one: scheduler processes in network namespaces). Network faults are iptables DROP
rules inside the nodes' own namespaces (``netns.Hosts``): silent drops, like a pulled cable,
never a fast "unreachable" error.

- ``isolate-leader``: the current leader drops all traffic to and from the other nodes. It
  KEEPS the metadata DB and the clients (workers, CLI: the root namespace's bridge address):
  the dangerous case, a deposed leader that can still write to the DB and still answer
  workers, which must nonetheless neither write nor hand out anything uncommitted.
- ``split``: a minority (containing the current leader when there is one) and a majority
  cannot see each other. Everyone still sees the DB.
- ``bridge``: two halves that cannot see each other, and one node that sees both.
- ``kill``: kill -9 a node (chosen by the schedule); heal restarts it.
- ``pause-leader``: SIGSTOP the leader; heal sends SIGCONT.
- ``loss``: random packet loss on one link (iptables ``statistic --mode random``: real loss).
- ``delay``: ``tc qdisc netem delay`` on one node's interface; reports itself unavailable on a
  kernel without sch_netem (such as this machine's).
- ``db-restart``: stop the metadata DB; heal starts it again.
- ``kill-worker``: kill -9 a worker process (not its running tasks: they finish on their own,
  as after a real crash, and their leases expire); heal starts a new worker in its place.
  Needs a cluster with workers (``workers_unavailable_reason``, ``kill_worker``,
  ``restart_worker``, ``worker_pid``); reports itself unavailable otherwise.
- ``kill-triggerer``: kill -9 a ``raftsched triggerer`` (``triggers.Triggerers``); heal starts
  a new one. Never drawn: every other kill-worker of a schedule becomes one (schedule.py).
- ``poison``: holds another fault (params ``under``, ``under_params``: the schedule wraps
  drawn faults, see ``schedule.with_poison``) and meanwhile sends hostile inputs
  (:func:`hostile_calls`: deep, huge and non-object confs, NUL and lone surrogates, 10,000-
  character and newline ids, dates in years 1 and 9999, out-of-range numbers, unknown ids)
  through the gRPC API to every node (a thread per node, its calls in order); it writes the
  manual DAG ``workload.POISON_DAG`` and triggers a run of it, whose task prints NUL and
  invalid UTF-8.
  Each answer is classified: ``refused`` (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED,
  FAILED_PRECONDITION, OUT_OF_RANGE, ALREADY_EXISTS, in one line), ``unavailable`` (the node
  is cut off, paused or has no quorum: UNAVAILABLE, DEADLINE_EXCEEDED), ``skipped`` (not sent:
  the node was unavailable twice in a row) or ``bad`` (INTERNAL, UNKNOWN, accepted, a
  message of several lines, anything else). The stop event carries every call; ``poison``
  ``triggered`` / ``trigger-failed`` events follow when the run was created.
  :func:`check_hostile_refusals` turns the timeline into a verdict (no ``bad`` answer).

Every start and stop is logged to a ``Timeline`` with the wall time. ``execute`` runs a whole
schedule and heals everything at the end, also when interrupted.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from scripts.partition.faults import ClockSkew, PowerLoss
from scripts.partition.schedule import Step
from scripts.partition.verdict import Verdict


class Network(Protocol):
    """Firewall operations inside one node's namespace (``netns.Hosts`` implements it)."""

    def block(self, i: int, peers: Sequence[str]) -> None: ...
    def drop_randomly(self, i: int, peer: str, probability: float) -> None: ...
    def heal(self, i: int) -> None: ...
    def netem_available(self) -> str | None: ...
    def delay(self, i: int, delay_ms: int) -> None: ...
    def clear_delay(self, i: int) -> None: ...


class Cluster(Protocol):
    """What the nemeses need from the cluster under test. Indexes are 0..len(names)-1."""

    network: Network

    @property
    def names(self) -> Sequence[str]: ...
    def namespace(self, i: int) -> str: ...
    def address(self, i: int) -> str:  # the node's IP inside its namespace
        ...
    def pid(self, i: int) -> int | None: ...
    def leader(self) -> int | None:  # a leader with a quorum, as the nodes report; None
        ...
    def kill(self, i: int) -> None:  # kill -9 and reap
        ...
    def restart(self, i: int) -> None: ...
    def stop_signal(self, i: int) -> None:  # SIGSTOP
        ...
    def cont(self, i: int) -> None:  # SIGCONT
        ...
    def db_unavailable_reason(self) -> str | None: ...
    def db_stop(self) -> None: ...
    def db_start(self) -> None: ...


class Timeline:
    """Fault events with wall time and seconds since the run began; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._t0 = clock()
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []

    def elapsed(self) -> float:
        return self._clock() - self._t0

    def log(self, nemesis: str, action: str, **details: Any) -> dict[str, Any]:
        event = {
            "t": round(self.elapsed(), 3),
            "wall": datetime.now(UTC).isoformat(),
            "nemesis": nemesis,
            "action": action,
            "details": details,
        }
        with self._lock:
            self.events.append(event)
        return event


class Skip(Exception):
    """The fault cannot start now (no leader, nemesis unavailable): logged as skipped."""


class Nemesis:
    name = ""
    timeline: Timeline | None = None  # set by ``execute``, for nemeses that log on their own

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        self.params = dict(params or {})

    def unavailable(self, cluster: Cluster) -> str | None:
        return None

    def start(self, cluster: Cluster) -> dict[str, Any]:
        raise NotImplementedError

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        raise NotImplementedError


def _leader(cluster: Cluster) -> int:
    leader = cluster.leader()
    if leader is None:
        raise Skip("no leader to target")
    return leader


def _others(cluster: Cluster, i: int) -> list[int]:
    return [j for j in range(len(cluster.names)) if j != i]


class _Partition(Nemesis):
    """Sides that drop each other; rules only in the first side's namespaces."""

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        self.blocked: list[int] = []

    def sides(self, cluster: Cluster) -> tuple[list[int], list[int], list[int]]:
        raise NotImplementedError  # (side a, side b, bridge nodes)

    def start(self, cluster: Cluster) -> dict[str, Any]:
        a, b, middle = self.sides(cluster)
        for i in a:
            self.blocked.append(i)
            cluster.network.block(i, [cluster.address(j) for j in b])
        name = cluster.names.__getitem__
        return {
            "side_a": [name(i) for i in a],
            "side_b": [name(i) for i in b],
            "sees_both": [name(i) for i in middle],
        }

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        for i in self.blocked:
            cluster.network.heal(i)
        return {"healed": [cluster.names[i] for i in self.blocked]}


class IsolateLeader(_Partition):
    name = "isolate-leader"

    def sides(self, cluster: Cluster) -> tuple[list[int], list[int], list[int]]:
        leader = _leader(cluster)
        return [leader], _others(cluster, leader), []


class Split(_Partition):
    name = "split"

    def sides(self, cluster: Cluster) -> tuple[list[int], list[int], list[int]]:
        n = len(cluster.names)
        if n < 3:
            raise Skip("a split needs at least 3 nodes")
        order = list(range(n))
        random.Random(self.params.get("shuffle", 0)).shuffle(order)
        leader = cluster.leader()
        if leader is not None:  # the leader goes to the minority: it must step down
            order.remove(leader)
            order.insert(0, leader)
        size = (n - 1) // 2
        return sorted(order[:size]), sorted(order[size:]), []


class Bridge(_Partition):
    name = "bridge"

    def sides(self, cluster: Cluster) -> tuple[list[int], list[int], list[int]]:
        n = len(cluster.names)
        if n < 3:
            raise Skip("a bridge needs at least 3 nodes")
        order = list(range(n))
        random.Random(self.params.get("shuffle", 0)).shuffle(order)
        middle, rest = order[0], order[1:]
        half = len(rest) // 2
        return sorted(rest[:half]), sorted(rest[half:]), [middle]


class Kill(Nemesis):
    name = "kill"

    def start(self, cluster: Cluster) -> dict[str, Any]:
        self.node = int(self.params.get("node", 0)) % len(cluster.names)
        pid = cluster.pid(self.node)
        was_leader = cluster.leader() == self.node
        cluster.kill(self.node)
        return {"node": cluster.names[self.node], "pid": pid, "was_leader": was_leader}

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        cluster.restart(self.node)
        return {"node": cluster.names[self.node], "pid": cluster.pid(self.node)}


class PauseLeader(Nemesis):
    name = "pause-leader"

    def start(self, cluster: Cluster) -> dict[str, Any]:
        self.node = _leader(cluster)
        cluster.stop_signal(self.node)
        return {"node": cluster.names[self.node], "pid": cluster.pid(self.node)}

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        cluster.cont(self.node)
        return {"node": cluster.names[self.node]}


class Loss(Nemesis):
    name = "loss"

    def start(self, cluster: Cluster) -> dict[str, Any]:
        n = len(cluster.names)
        a, b = (int(x) % n for x in self.params.get("link", [0, 1]))
        if a == b:
            raise Skip("a link needs two different nodes")
        self.node = a
        probability = float(self.params.get("probability", 0.3))
        cluster.network.drop_randomly(a, cluster.address(b), probability)
        return {"link": [cluster.names[a], cluster.names[b]], "probability": probability}

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        cluster.network.heal(self.node)
        return {"healed": cluster.names[self.node]}


class Delay(Nemesis):
    name = "delay"

    def unavailable(self, cluster: Cluster) -> str | None:
        return cluster.network.netem_available()

    def start(self, cluster: Cluster) -> dict[str, Any]:
        n = len(cluster.names)
        self.node = int(self.params.get("link", [0, 1])[0]) % n
        delay_ms = int(self.params.get("delay_ms", 100))
        cluster.network.delay(self.node, delay_ms)
        return {"node": cluster.names[self.node], "delay_ms": delay_ms}

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        cluster.network.clear_delay(self.node)
        return {"node": cluster.names[self.node]}


class DbRestart(Nemesis):
    name = "db-restart"

    def unavailable(self, cluster: Cluster) -> str | None:
        return cluster.db_unavailable_reason()

    def start(self, cluster: Cluster) -> dict[str, Any]:
        cluster.db_stop()
        return {}

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        cluster.db_start()
        return {}


class KillWorker(Nemesis):
    name = "kill-worker"

    def unavailable(self, cluster: Cluster) -> str | None:
        reason = getattr(cluster, "workers_unavailable_reason", None)
        return "the cluster has no workers" if reason is None else reason()

    def start(self, cluster: Cluster) -> dict[str, Any]:
        workers = cluster.workers  # type: ignore[attr-defined]
        self.worker = int(self.params.get("worker", 0)) % workers.count
        pid = cluster.worker_pid(self.worker)  # type: ignore[attr-defined]
        if pid is None:
            raise Skip(f"worker {self.worker} is not running")
        cluster.kill_worker(self.worker)  # type: ignore[attr-defined]
        return {"worker": self.worker, "pid": pid}

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        cluster.restart_worker(self.worker)  # type: ignore[attr-defined]
        return {"worker": self.worker, "pid": cluster.worker_pid(self.worker)}  # type: ignore[attr-defined]


class KillTriggerer(Nemesis):
    """kill -9 a triggerer; heal starts a new one in its place. Its triggers are leased again
    once their leases expire (docs/architecture.md §17)."""

    name = "kill-triggerer"

    def unavailable(self, cluster: Cluster) -> str | None:
        reason = getattr(cluster, "triggerers_unavailable_reason", None)
        return "the cluster has no triggerers" if reason is None else reason()

    def start(self, cluster: Cluster) -> dict[str, Any]:
        triggerers = cluster.triggerers  # type: ignore[attr-defined]
        self.triggerer = int(self.params.get("triggerer", 0)) % triggerers.count
        pid = triggerers.pid(self.triggerer)
        if pid is None:
            raise Skip(f"triggerer {self.triggerer} is not running")
        triggerers.kill(self.triggerer)
        return {"triggerer": self.triggerer, "pid": pid}

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        triggerers = cluster.triggerers  # type: ignore[attr-defined]
        triggerers.restart(self.triggerer)
        return {"triggerer": self.triggerer, "pid": triggerers.pid(self.triggerer)}


# -- poison: hostile inputs while another fault holds -------------------------------------------

REFUSALS = frozenset(
    {
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "OUT_OF_RANGE",
        "ALREADY_EXISTS",
    }
)
NO_ANSWER = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
CALL_DEADLINE = 2.0  # seconds per hostile call, retries included
CALLS_JOIN = 20.0  # at most this long after the heal for the calls to finish
TRIGGER_DEADLINE = 45.0  # seconds to create the poison run (its DAG file may be unparsed yet)
U32_MAX, U64_MAX = (1 << 32) - 1, (1 << 64) - 1


def hostile_calls(dag_id: str, tag: str) -> list[tuple[str, str, str, Any]]:
    """(name, service, method, request) of every hostile call; ``dag_id``: a manual DAG for
    the triggers (an accepted one would create a run of it); ``tag`` keeps run ids unique."""
    from google.protobuf.timestamp_pb2 import Timestamp

    from raftsched.api.gen import common_pb2, dag_pb2, worker_pb2

    def ts(year: int, month: int = 1, day: int = 1) -> Timestamp:
        stamp = Timestamp()
        stamp.FromDatetime(datetime(year, month, day, tzinfo=UTC))
        return stamp

    def trigger(name: str, **fields: Any) -> tuple[str, str, str, Any]:
        fields.setdefault("dag_id", dag_id)
        slug = "".join(ch if ch.isalnum() else "-" for ch in name)
        fields.setdefault("run_id", f"poison-hostile-{tag}-{slug}"[:200])
        return name, "dags", "TriggerDag", dag_pb2.TriggerDagRequest(**fields)

    deep = '{"a":' * 500 + "1" + "}" * 500
    deeper = '{"a":' + "[" * 100_000 + "]" * 100_000 + "}"
    long_id = "i" * 10_000
    return [
        trigger("conf 500 levels deep", conf_json=deep),
        trigger("conf 100,000 levels deep", conf_json=deeper),
        trigger(
            "conf 30,000 levels deep (60 KB)", conf_json='{"a":' + "[" * 30_000 + "]" * 30_000 + "}"
        ),
        trigger("conf that is a JSON array", conf_json="[1, 2]"),
        trigger("conf that is a JSON string", conf_json='"a string"'),
        trigger("conf with \\u0000", conf_json='{"a": "x\\u0000y"}'),
        trigger("conf with a lone surrogate", conf_json='{"a": "\\ud800"}'),
        trigger("conf with a 5000-digit int", conf_json='{"a": ' + "9" * 5000 + "}"),
        trigger("run_id of 10,000 characters", run_id=long_id),
        trigger("run_id with a newline", run_id="bad\nrun"),
        trigger("logical_date in year 1", logical_date=ts(1)),
        trigger("logical_date in year 9999", logical_date=ts(9999, 12, 31)),
        ("dag_id of 10,000 characters", "dags", "GetDag", dag_pb2.GetDagRequest(dag_id=long_id)),
        ("an unknown DAG", "dags", "GetDag", dag_pb2.GetDagRequest(dag_id="no_such_dag")),
        (
            "an unknown run",
            "dags",
            "ListTaskInstances",
            dag_pb2.ListTaskInstancesRequest(dag_id=dag_id, run_id="no-such-run"),
        ),
        (
            "page_size 2^32-1",
            "dags",
            "ListDags",
            dag_pb2.ListDagsRequest(page_size=U32_MAX),
        ),
        (
            "after_seq 2^64-1",
            "dags",
            "GetTaskLog",
            dag_pb2.GetTaskLogRequest(
                dag_id=dag_id, run_id="no-such-run", task_id="t", after_seq=U64_MAX
            ),
        ),
        (
            "max_tasks 2^32-1",
            "workers",
            "Lease",
            worker_pb2.LeaseRequest(worker_id="hostile", max_tasks=U32_MAX),
        ),
        (
            "lease_ttl_seconds NaN",
            "workers",
            "Lease",
            worker_pb2.LeaseRequest(worker_id="hostile", max_tasks=1, lease_ttl_seconds=math.nan),
        ),
        (
            "wait_seconds -1",
            "workers",
            "Lease",
            worker_pb2.LeaseRequest(worker_id="hostile", max_tasks=1, wait_seconds=-1.0),
        ),
        (
            "heartbeat lease_ttl_seconds -1",
            "workers",
            "Heartbeat",
            worker_pb2.HeartbeatRequest(worker_id="hostile", lease_ttl_seconds=-1.0),
        ),
        (
            "logs with NUL of an unknown task",
            "workers",
            "AppendLogs",
            worker_pb2.AppendLogsRequest(
                worker_id="hostile",
                key=common_pb2.TaskKey(dag_id=dag_id, run_id="no-such-run", task_id="t"),
                token=U64_MAX,
                chunks=[common_pb2.LogText(stream="stdout", text="a\x00b")],
            ),
        ),
    ]


def classify(answer: BaseException | None) -> tuple[str, str, str]:
    """(outcome, code, message) of one hostile call: see the module docstring."""
    from raftsched.errors import ApiError, NoQuorumError

    if answer is None:
        return "bad", "OK", "accepted"
    if isinstance(answer, ApiError):
        code, message = answer.code.name, answer.message
    elif isinstance(answer, NoQuorumError):
        code, message = "UNAVAILABLE", str(answer)
    else:
        return "bad", type(answer).__name__, str(answer)[:300]
    if code in NO_ANSWER:
        return "unavailable", code, message[:300]
    if code in REFUSALS and "\n" not in message:
        return "refused", code, message[:300]
    return "bad", code, message[:300]


def _default_client(servers: Sequence[str], **kwargs: Any) -> Any:
    from raftsched.api.client import RaftschedClient
    from scripts.partition.workload import ADMIN_TOKEN

    return RaftschedClient(list(servers), token=ADMIN_TOKEN, **kwargs)


class Poison(Nemesis):
    name = "poison"
    # (servers, **kwargs) -> a RaftschedClient-like client; tests replace it
    client_factory: Callable[..., Any] = staticmethod(_default_client)

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        under = self.params.get("under")
        self.inner = make(under, self.params.get("under_params")) if under else None
        self.inner_started = False
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.tag = f"{int(time.time() * 1000) % 10**9}"

    def unavailable(self, cluster: Cluster) -> str | None:
        if not getattr(cluster, "api_addresses", None):
            return "the cluster has no gRPC API addresses"
        return None

    def start(self, cluster: Cluster) -> dict[str, Any]:
        details: dict[str, Any] = {"under": self.params.get("under")}
        if self.inner is not None:
            reason = self.inner.unavailable(cluster)
            if reason is None:
                try:
                    details.update(self.inner.start(cluster))
                    self.inner_started = True
                except Skip as why:
                    reason = str(why)
            if reason is not None:
                details["under_skipped"] = reason
        self._write_dag(cluster)
        addresses = list(getattr(cluster, "api_addresses", []))
        names = list(cluster.names)
        for i, address in enumerate(addresses):
            name = names[i] if i < len(names) else address
            self._spawn(f"poison-{i}", self._fire, name, address)
        self._spawn("poison-trigger", self._trigger, addresses)
        return details

    def stop(self, cluster: Cluster) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.inner_started:
            self.inner_started = False
            assert self.inner is not None
            details.update(self.inner.stop(cluster))
        end = time.monotonic() + CALLS_JOIN
        for thread in self._threads:
            if thread.name != "poison-trigger":
                thread.join(timeout=max(0.0, end - time.monotonic()))
        with self._lock:
            calls = list(self.calls)
        counts = {k: sum(1 for c in calls if c["outcome"] == k) for k in OUTCOMES}
        details.update(counts, calls=calls, all_refused=counts["bad"] == 0)
        return details

    # -- the work, on threads of their own -----------------------------------------------

    def _spawn(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _write_dag(self, cluster: Cluster) -> None:
        write = getattr(cluster, "write_dags", None)
        workdir = getattr(cluster, "workdir", None)
        if write is None or workdir is None:
            return
        from scripts.partition.workload import POISON_DAG, poison_dag_file

        folder = getattr(cluster, "dags_folder", None)
        if folder is not None and (folder / f"{POISON_DAG}.py").exists():
            return  # an earlier poison step wrote it
        write({f"{POISON_DAG}.py": poison_dag_file(workdir / "pt_task.sh")})

    def _fire(self, node: str, address: str) -> None:
        """Every hostile call at one node, in order; the rest skipped once it has not
        answered twice in a row (cut off or paused)."""
        from scripts.partition.workload import POISON_DAG

        client = self.client_factory(
            [address],
            deadline=CALL_DEADLINE,
            attempt_timeout=CALL_DEADLINE,
            max_message_bytes=16 * 1024 * 1024,
        )
        silent = 0
        try:
            for call, service, method, request in hostile_calls(POISON_DAG, self.tag):
                record = {"node": node, "call": call, "method": method}
                if silent >= 2:
                    record.update(outcome="skipped", code="", message="node not answering")
                else:
                    outcome, code, message = classify(_send(client, service, method, request))
                    record.update(outcome=outcome, code=code, message=message)
                    silent = silent + 1 if outcome == "unavailable" else 0
                with self._lock:
                    self.calls.append(record)
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def _trigger(self, addresses: list[str]) -> None:
        """One run of the poison DAG through any node (retried until its file is parsed and
        a quorum commits it), logged to the timeline."""
        from raftsched.api.gen import dag_pb2
        from scripts.partition.workload import POISON_DAG

        run_id = f"poison__{self.tag}"
        client = self.client_factory(addresses, deadline=5.0, attempt_timeout=2.0)
        end = time.monotonic() + TRIGGER_DEADLINE
        last = ""
        attempt = 0
        try:
            while time.monotonic() < end:
                # A refusal is remembered under its request id: after NOT_FOUND (the DAG file
                # not registered yet) ask again under a new one. After no answer, the same one
                # (it may have been applied); the fixed run id makes a repeat ALREADY_EXISTS.
                request = dag_pb2.TriggerDagRequest(
                    dag_id=POISON_DAG,
                    run_id=run_id,
                    conf_json='{"poison": true}',
                    request_id=f"{run_id}#{attempt}",
                )
                error = _send(client, "dags", "TriggerDag", request)
                outcome, code, message = classify(error) if error else ("ok", "OK", "")
                if outcome == "ok" or code == "ALREADY_EXISTS":
                    self._log("triggered", run_id=run_id, dag_id=POISON_DAG)
                    return
                last = f"{code}: {message}"
                if outcome == "bad" or code not in ("NOT_FOUND", *NO_ANSWER):
                    break
                if code == "NOT_FOUND":
                    attempt += 1
                time.sleep(1.0)
            self._log("trigger-failed", run_id=run_id, dag_id=POISON_DAG, last=last)
        finally:
            with contextlib.suppress(Exception):
                client.close()

    def _log(self, action: str, **details: Any) -> None:
        if self.timeline is not None:
            self.timeline.log(self.name, action, **details)


OUTCOMES = ("refused", "unavailable", "skipped", "bad")


def _send(client: Any, service: str, method: str, request: Any) -> BaseException | None:
    """Send one call; None when it was answered OK, else the exception it raised."""
    try:
        answer = getattr(getattr(client, service), method)(request)
        if method == "GetTaskLog":
            list(answer)  # a stream: its error comes while reading it
    except Exception as err:
        return err
    return None


class HostileRefusalsVerdict(Verdict):
    @property
    def title(self) -> str:
        return "hostile inputs are refused, never INTERNAL (poison nemesis)"


def check_hostile_refusals(events: Sequence[dict[str, Any]]) -> Verdict:
    """A verdict over the poison steps of a timeline: every hostile call was refused (or
    found its node unavailable); a ``bad`` answer, or a poison run never created, fails."""
    verdict = HostileRefusalsVerdict("hostile_inputs_refused")
    stops = [e for e in events if e.get("nemesis") == "poison" and e.get("action") == "stop"]
    for event in stops:
        for call in event.get("details", {}).get("calls", []):
            verdict.checked += 1
            if call.get("outcome") == "bad":
                verdict.add(
                    "NOT_REFUSED",
                    f"{call.get('call')} at {call.get('node')}: {call.get('code')}:"
                    f" {str(call.get('message'))[:200]}",
                    call=call,
                    t=event.get("t"),
                )
    for event in events:
        if event.get("nemesis") == "poison" and event.get("action") == "trigger-failed":
            verdict.add(
                "NO_POISON_RUN",
                f"the poison run {event['details'].get('run_id')} was never created:"
                f" {event['details'].get('last')}",
                t=event.get("t"),
            )
    counts = {k: 0 for k in OUTCOMES}
    for event in stops:
        for k in OUTCOMES:
            counts[k] += int(event.get("details", {}).get(k, 0))
    runs = sum(1 for e in events if e.get("nemesis") == "poison" and e.get("action") == "triggered")
    verdict.notes.append(
        f"{len(stops)} poison steps: {counts['refused']} hostile calls refused,"
        f" {counts['unavailable']} met an unavailable node, {counts['skipped']} skipped;"
        f" {runs} poison runs created"
    )
    return verdict


KINDS: dict[str, type[Nemesis]] = {
    k.name: k
    for k in (
        IsolateLeader,
        Split,
        Bridge,
        Kill,
        PauseLeader,
        Loss,
        Delay,
        DbRestart,
        KillWorker,
        Poison,
        PowerLoss,
        ClockSkew,
        KillTriggerer,
    )
}


def make(name: str, params: dict[str, Any] | None = None) -> Nemesis:
    try:
        return KINDS[name](params)
    except KeyError:
        raise ValueError(f"unknown nemesis {name!r}: choose one of {sorted(KINDS)}") from None


def availability(cluster: Cluster) -> dict[str, str | None]:
    """nemesis name -> None (available) or why it is not, on this cluster and machine."""
    return {name: make(name).unavailable(cluster) for name in KINDS}


def heal_everything(cluster: Cluster, timeline: Timeline | None = None) -> None:
    """Best effort: flush every node's rules, SIGCONT all, start the DB. (Dead nodes are the
    Kill nemesis's to restart; a fault that failed half-way is healed here.)"""
    for i in range(len(cluster.names)):
        for action in (cluster.network.heal, cluster.cont):
            try:
                action(i)
            except Exception as err:  # keep healing the rest
                if timeline is not None:
                    timeline.log("heal-all", "error", node=cluster.names[i], error=str(err))
        if cluster.network.netem_available() is None:
            try:
                cluster.network.clear_delay(i)
            except Exception as err:  # keep healing the rest
                if timeline is not None:
                    timeline.log("heal-all", "error", node=cluster.names[i], error=str(err))
    if cluster.db_unavailable_reason() is None:
        try:
            cluster.db_start()
        except Exception as err:
            if timeline is not None:
                timeline.log("heal-all", "error", db=True, error=str(err))


def execute(
    steps: Sequence[Step],
    cluster: Cluster,
    timeline: Timeline,
    *,
    stop: threading.Event | None = None,
) -> None:
    """Run each step at its time (seconds on ``timeline``'s clock): start, hold, heal.

    Unavailable or untargetable faults are logged as ``skip``. On any exit (also an exception
    or ``stop`` being set) the running fault is healed and ``heal_everything`` runs.
    """
    stop = stop or threading.Event()
    active: Nemesis | None = None
    try:
        for step in steps:
            if _wait_until(timeline, step.at, stop):
                return
            nemesis = make(step.nemesis, step.params)
            nemesis.timeline = timeline
            reason = nemesis.unavailable(cluster)
            if reason is not None:
                timeline.log(step.nemesis, "skip", reason=reason)
                continue
            try:
                details = nemesis.start(cluster)
            except Skip as why:
                timeline.log(step.nemesis, "skip", reason=str(why))
                continue
            active = nemesis
            timeline.log(step.nemesis, "start", planned_heal_at=step.heal_at, **details)
            _wait_until(timeline, step.heal_at, stop)
            active = None
            timeline.log(step.nemesis, "stop", **nemesis.stop(cluster))
    finally:
        if active is not None:
            try:
                timeline.log(active.name, "stop", **active.stop(cluster))
            except Exception as err:
                timeline.log(active.name, "error", error=str(err))
        heal_everything(cluster, timeline)


def _wait_until(timeline: Timeline, t: float, stop: threading.Event) -> bool:
    """Sleep until ``t`` on the timeline; True if ``stop`` was set meanwhile."""
    while (left := t - timeline.elapsed()) > 0:
        if stop.wait(min(left, 0.5)):
            return True
    return stop.is_set()
