"""The task queue: where task instances wait and run, and the indexes that find them fast.

Owns the ready queues (QUEUED tasks by priority, one per lane: a task queue name and a pool
name; a worker leases from the queues it serves, a full pool's lanes are passed over), the
running set with its per-DAG counts
and the lease-expiry index, the retry index (UP_FOR_RETRY tasks by next_retry_at), and the
fences (tasks cleared or marked while they ran -> when their revoked lease ends; they are not
leased again before). The task instances themselves live in their runs (``run_table``).
Guarantees, kept by :meth:`move` (which ``transitions.set_state`` calls on every state
change): a task instance is in the ready queue iff QUEUED, in the running set iff RUNNING,
counted as a retry iff UP_FOR_RETRY; each fence's fingerprint (``digest.fp_fence``) is in
the shared digest sum exactly while it is held. The time indexes may hold stale entries
(checked on read, pruned by :meth:`prune`). Raises ``KeyError`` only on a bug (a RUNNING
task missing from the running set).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import datetime

from raftsched.core import digest as dg
from raftsched.core.model import DEFAULT_QUEUE, Lease, TaskInstance, TaskKey, TaskState
from raftsched.core.pool_table import DEFAULT_POOL
from raftsched.core.ready import ReadyQueue, TimeIndex

Lane = tuple[str, str]  # (queue name, pool name): where a QUEUED task waits


def _any_pool(pool: str) -> bool:
    return True


class TaskQueue:
    __slots__ = (
        "_expiry",
        "_fences",
        "_find",
        "_n_retry",
        "_queue_of",
        "_ready",
        "_retries",
        "_running",
        "_running_by_dag",
        "_sum",
    )

    def __init__(
        self, digest_sum: dg.DigestSum, find: Callable[[TaskKey], TaskInstance | None]
    ) -> None:
        """``find`` looks a task instance up in the live runs (the retry index's check)."""
        self._sum = digest_sum
        self._find = find
        # lane -> its ready queue (none kept empty); each QUEUED task's lane
        self._ready: dict[Lane, ReadyQueue] = {}
        self._queue_of: dict[TaskKey, Lane] = {}
        self._running: dict[TaskKey, TaskInstance] = {}
        self._running_by_dag: dict[str, int] = {}
        self._n_retry = 0
        self._retries: TimeIndex[TaskKey] = TimeIndex(self._retry_live)
        self._expiry: TimeIndex[TaskKey] = TimeIndex(self._lease_live)
        self._fences: dict[TaskKey, datetime] = {}

    def _retry_live(self, key: TaskKey, when: datetime) -> bool:
        ti = self._find(key)
        return ti is not None and ti.state is TaskState.UP_FOR_RETRY and ti.next_retry_at == when

    def _lease_live(self, key: TaskKey, when: datetime) -> bool:
        ti = self._running.get(key)
        return ti is not None and ti.lease is not None and ti.lease.expires_at == when

    # -- state changes ----------------------------------------------------------------------

    def leave(self, ti: TaskInstance, old: TaskState) -> None:
        """``ti`` leaves state ``old``: out of the index that holds it."""
        if old is TaskState.QUEUED:
            name = self._queue_of.pop(ti.key, (DEFAULT_QUEUE, ""))
            ready = self._ready.get(name)
            if ready is not None:
                ready.discard(ti.key)
                if not len(ready):
                    del self._ready[name]
        elif old is TaskState.RUNNING:
            dag_id = ti.key.dag_id
            del self._running[ti.key]
            self._running_by_dag[dag_id] -= 1
            self.unblock(dag_id)
        elif old is TaskState.UP_FOR_RETRY:
            self._n_retry -= 1

    def enter(
        self,
        ti: TaskInstance,
        new: TaskState,
        priority_weight: int,
        queue: str = DEFAULT_QUEUE,
        pool: str = "",
    ) -> None:
        """``ti`` (already in state ``new``, with what it needs set) into its index; a QUEUED
        one into the ready queue of its task's ``queue`` and ``pool``."""
        if new is TaskState.QUEUED:
            assert ti.queued_at is not None
            lane = self._queue_of[ti.key] = (queue, pool)
            self._ready_queue(lane).push(ti.key, priority_weight, ti.queued_at)
        elif new is TaskState.RUNNING:
            dag_id = ti.key.dag_id
            self._running[ti.key] = ti
            self._running_by_dag[dag_id] = self._running_by_dag.get(dag_id, 0) + 1
        elif new is TaskState.UP_FOR_RETRY:
            assert ti.next_retry_at is not None
            self._n_retry += 1
            self._retries.push(ti.next_retry_at, ti.key)

    # -- the ready queue --------------------------------------------------------------------

    def _ready_queue(self, name: Lane) -> ReadyQueue:
        ready = self._ready.get(name)
        if ready is None:
            ready = self._ready[name] = ReadyQueue()
        return ready

    @property
    def queued_count(self) -> int:
        return sum(len(ready) for ready in self._ready.values())

    def queued_by_queue(self) -> dict[str, int]:
        """How many tasks wait in each queue (the queues with any)."""
        out: dict[str, int] = {}
        for (name, _), ready in sorted(self._ready.items()):
            if len(ready):
                out[name] = out.get(name, 0) + len(ready)
        return out

    def queued_by_pool(self, default: str = DEFAULT_POOL) -> dict[str, int]:
        """How many tasks wait in each pool (the pools with any; a task naming none counts
        in ``default``)."""
        out: dict[str, int] = {}
        for (_, pool), ready in sorted(self._ready.items()):
            if len(ready):
                out[pool or default] = out.get(pool or default, 0) + len(ready)
        return out

    def pop_ready(
        self,
        can_take: Callable[[str], bool],
        queues: Collection[str] = (),
        pool_open: Callable[[str], bool] = _any_pool,
    ) -> TaskKey | None:
        """The next QUEUED task of ``queues`` (none: the default queue) of a DAG that
        ``can_take`` one, in a pool that is ``pool_open``; None if none. The best of the
        lanes' heads in the one order (priority_weight desc, queued_at, key), whatever order
        the queues are listed in."""
        wanted = set(queues or (DEFAULT_QUEUE,))
        best: tuple[tuple[int, datetime, TaskKey], Lane] | None = None
        for lane in self._ready:  # the order does not matter: the best head wins
            if lane[0] not in wanted or not pool_open(lane[1]):
                continue
            head = self._ready[lane].peek(can_take)
            if head is not None and (best is None or head < best[0]):
                best = (head, lane)
        if best is None:
            return None
        return self._ready[best[1]].pop(can_take)

    def requeue(self, key: TaskKey, priority_weight: int, queued_at: datetime) -> None:
        """Put a popped task back in its old place (same queue, weight and queued_at)."""
        self._ready_queue(self._queue_of[key]).push(key, priority_weight, queued_at)

    def unblock(self, dag_id: str) -> None:
        """The DAG may take more tasks now (unpaused, max_active_tasks grown, a slot freed)."""
        for ready in self._ready.values():
            ready.unblock(dag_id)

    # -- running tasks and leases -----------------------------------------------------------

    def running_count(self, dag_id: str | None = None) -> int:
        if dag_id is None:
            return len(self._running)
        return self._running_by_dag.get(dag_id, 0)

    def running(self, key: TaskKey) -> TaskInstance | None:
        return self._running.get(key)

    def leases(self) -> list[Lease]:
        """Live leases (one per RUNNING task instance)."""
        return [ti.lease for ti in self._running.values() if ti.lease is not None]

    def watch_expiry(self, expires_at: datetime, key: TaskKey) -> None:
        """The lease of ``key`` now ends at ``expires_at``."""
        self._expiry.push(expires_at, key)

    def expired(self, now: datetime, limit: int | None = None) -> Iterator[Lease]:
        """Live leases with expires_at <= now, earliest first."""
        for key in self._expiry.due(now, limit):
            lease = self._running[key].lease
            assert lease is not None
            yield lease

    def retries_due(self, now: datetime, limit: int | None = None) -> list[TaskKey]:
        """UP_FOR_RETRY tasks whose next_retry_at <= now, earliest first."""
        return self._retries.due(now, limit)

    def prune(self) -> None:
        """Drop stale entries of the time indexes (after each command)."""
        self._retries.prune(self._n_retry)
        self._expiry.prune(len(self._running))

    # -- fences -----------------------------------------------------------------------------

    def fence(self, ti: TaskInstance) -> None:
        """``ti`` is RUNNING and its lease is being revoked: remember until when it holds."""
        assert ti.lease is not None
        old = self._fences.get(ti.key)
        if old is not None:
            self._sum.remove(dg.fp_fence(ti.key, old))
        until = max(ti.lease.expires_at, old) if old is not None else ti.lease.expires_at
        self._fences[ti.key] = until
        self._sum.add(dg.fp_fence(ti.key, until))

    def still_fenced(self, key: TaskKey, now: datetime) -> bool:
        """Whether ``key``'s revoked lease may still be running (a fence past it is dropped):
        its next attempt must never overlap the old one."""
        until = self._fences.get(key)
        if until is None:
            return False
        if until > now:
            return True
        self.drop_fence(key)
        return False

    def drop_fence(self, key: TaskKey) -> None:
        until = self._fences.pop(key, None)
        if until is not None:
            self._sum.remove(dg.fp_fence(key, until))

    def fences(self) -> Iterator[tuple[TaskKey, datetime]]:
        return iter(self._fences.items())

    def load_fences(self, items: Iterable[tuple[TaskKey, datetime]]) -> None:
        """Restore; the caller recomputes the digest."""
        self._fences = dict(items)
