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

Every start and stop is logged to a ``Timeline`` with the wall time. ``execute`` runs a whole
schedule and heals everything at the end, also when interrupted.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from scripts.partition.schedule import Step


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


KINDS: dict[str, type[Nemesis]] = {
    k.name: k
    for k in (IsolateLeader, Split, Bridge, Kill, PauseLeader, Loss, Delay, DbRestart, KillWorker)
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
