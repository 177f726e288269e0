"""Scheduling maths that needs no state: trigger rules, retry delays, a DAG's shape, and the
indexes ``SchedulerState`` keeps so a leader tick costs O(work · log n), not O(everything).

Trigger rules follow Airflow's ``TriggerRuleDep`` (with ``flag_upstream_failed``): a task
without upstream is always ready; otherwise its upstream states give one verdict:

=============  ==========================================  =====================================
rule           READY when                                  can never run (verdict)
=============  ==========================================  =====================================
all_success    every upstream succeeded                    any failed/upstream_failed ->
                                                           UPSTREAM_FAILED; else any skipped ->
                                                           SKIPPED
all_failed     every upstream failed/upstream_failed       any success or skipped -> SKIPPED
all_done       every upstream finished                     never
one_success    at least one upstream succeeded             all finished, none succeeded:
                                                           all skipped -> SKIPPED, else
                                                           UPSTREAM_FAILED
one_failed     at least one failed/upstream_failed         all finished, none failed -> SKIPPED
none_failed    every upstream succeeded or was skipped     any failed/upstream_failed ->
                                                           UPSTREAM_FAILED
none_failed_   every upstream finished, none failed, at    any failed/upstream_failed ->
min_one_       least one succeeded                         UPSTREAM_FAILED; all finished, none
success                                                    succeeded -> SKIPPED
all_skipped    every upstream was skipped                  any success/failed/upstream_failed
                                                           -> SKIPPED
none_skipped   every upstream finished, none skipped       any skipped -> SKIPPED
=============  ==========================================  =====================================

A ``@task.branch`` skips the direct downstream tasks it does not follow
(``core/xcom.py``); the rules above carry such skips further down, as in Airflow.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Generic, TypeVar

from raftsched.core.model import DagSpec, TaskKey, TaskSpec, TaskState, TriggerRule

# Exponential backoff without max_retry_delay is still capped (as Airflow does): one day.
DEFAULT_MAX_RETRY_DELAY_SECONDS = 24 * 60 * 60.0


class Verdict(StrEnum):
    WAIT = "wait"
    READY = "ready"
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class UpstreamCounts:
    total: int = 0
    success: int = 0
    failed: int = 0  # FAILED
    upstream_failed: int = 0
    skipped: int = 0

    @property
    def done(self) -> int:
        return self.success + self.failed + self.upstream_failed + self.skipped

    @classmethod
    def of(cls, states: Iterable[TaskState]) -> UpstreamCounts:
        total = success = failed = upstream_failed = skipped = 0
        for state in states:
            total += 1
            if state is TaskState.SUCCESS:
                success += 1
            elif state is TaskState.FAILED:
                failed += 1
            elif state is TaskState.UPSTREAM_FAILED:
                upstream_failed += 1
            elif state is TaskState.SKIPPED:
                skipped += 1
        return cls(total, success, failed, upstream_failed, skipped)


def evaluate_trigger(rule: TriggerRule, up: UpstreamCounts) -> Verdict:
    """The verdict for a task still in state NONE, given its upstream tasks' states."""
    if up.total == 0:
        return Verdict.READY
    rule = TriggerRule(rule)
    failures = up.failed + up.upstream_failed
    all_done = up.done == up.total
    if rule is TriggerRule.ALL_SUCCESS:
        if failures:
            return Verdict.UPSTREAM_FAILED
        if up.skipped:
            return Verdict.SKIPPED
        return Verdict.READY if up.success == up.total else Verdict.WAIT
    if rule is TriggerRule.ALL_FAILED:
        if up.success or up.skipped:
            return Verdict.SKIPPED
        return Verdict.READY if failures == up.total else Verdict.WAIT
    if rule is TriggerRule.ALL_DONE:
        return Verdict.READY if all_done else Verdict.WAIT
    if rule is TriggerRule.ONE_SUCCESS:
        if up.success:
            return Verdict.READY
        if all_done:
            return Verdict.SKIPPED if up.skipped == up.total else Verdict.UPSTREAM_FAILED
        return Verdict.WAIT
    if rule is TriggerRule.ONE_FAILED:
        if failures:
            return Verdict.READY
        return Verdict.SKIPPED if all_done else Verdict.WAIT
    if rule is TriggerRule.NONE_FAILED:
        if failures:
            return Verdict.UPSTREAM_FAILED
        return Verdict.READY if up.success + up.skipped == up.total else Verdict.WAIT
    if rule is TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS:
        if failures:
            return Verdict.UPSTREAM_FAILED
        if not all_done:
            return Verdict.WAIT
        return Verdict.READY if up.success else Verdict.SKIPPED
    if rule is TriggerRule.ALL_SKIPPED:
        if up.success or failures:
            return Verdict.SKIPPED
        return Verdict.READY if up.skipped == up.total else Verdict.WAIT
    if rule is TriggerRule.NONE_SKIPPED:
        if up.skipped:
            return Verdict.SKIPPED
        return Verdict.READY if all_done else Verdict.WAIT
    raise ValueError(f"unknown trigger rule {rule!r}")


def retry_delay_seconds(task: TaskSpec, try_number: int) -> float:
    """Seconds to wait after attempt ``try_number`` (1-based) failed.

    ``retry_delay``, or with ``retry_exponential_backoff`` ``retry_delay * 2**(try_number-1)``;
    capped by ``max_retry_delay`` (or one day when backoff has no cap of its own).
    """
    base = max(0.0, float(task.retry_delay_seconds))
    cap = task.max_retry_delay_seconds
    if task.retry_exponential_backoff:
        exponent = min(max(try_number - 1, 0), 64)
        delay = base * 2.0**exponent
        delay = min(delay, DEFAULT_MAX_RETRY_DELAY_SECONDS if cap is None else cap)
    else:
        delay = base if cap is None else min(base, cap)
    return max(0.0, delay)


def next_retry_at(task: TaskSpec, try_number: int, now: datetime) -> datetime:
    return now + timedelta(seconds=retry_delay_seconds(task, try_number))


class Topology:
    """A DAG spec's shape: tasks by id, upstream/downstream edges, leaves. Built once per spec."""

    __slots__ = ("downstream", "leaves", "tasks", "upstream")

    def __init__(self, spec: DagSpec) -> None:
        self.tasks: dict[str, TaskSpec] = {task.task_id: task for task in spec.tasks}
        self.upstream: dict[str, tuple[str, ...]] = {}
        down: dict[str, list[str]] = {task_id: [] for task_id in self.tasks}
        for task in spec.tasks:  # unknown upstream ids are ignored (the parser rejects them)
            ups = tuple(sorted({u for u in task.upstream if u in self.tasks}))
            self.upstream[task.task_id] = ups
            for up in ups:
                down[up].append(task.task_id)
        self.downstream: dict[str, tuple[str, ...]] = {k: tuple(sorted(v)) for k, v in down.items()}
        self.leaves = frozenset(k for k, v in self.downstream.items() if not v)

    def descendants(self, task_ids: Iterable[str]) -> set[str]:
        """The given tasks and everything downstream of them (transitively)."""
        seen: set[str] = set()
        stack = [t for t in task_ids if t in self.tasks]
        while stack:
            task_id = stack.pop()
            if task_id not in seen:
                seen.add(task_id)
                stack.extend(self.downstream[task_id])
        return seen


_ReadyEntry = tuple[int, datetime, TaskKey, int]  # (-priority_weight, queued_at, key, stamp)


class ReadyQueue:
    """QUEUED task instances ordered by priority_weight desc, then queued_at, then key.

    One heap per DAG plus a heap of each DAG's best entry, so picking honours per-DAG limits
    (``can_take``) without scanning the tasks of a DAG that is full or paused: a blocked DAG's
    head leaves the head heap until :meth:`unblock`. Entries are deleted lazily (a stamp per
    queued key). Derived data: rebuilt from the task instances, never snapshotted.
    """

    def __init__(self) -> None:
        self._per_dag: dict[str, list[_ReadyEntry]] = {}
        self._heads: list[tuple[tuple[int, datetime, TaskKey], str]] = []
        self._stamps: dict[TaskKey, int] = {}
        self._blocked: set[str] = set()
        self._next_stamp = 0
        self._entries = 0

    def __len__(self) -> int:
        return len(self._stamps)

    def __contains__(self, key: TaskKey) -> bool:
        return key in self._stamps

    def push(self, key: TaskKey, priority_weight: int, queued_at: datetime) -> None:
        self._next_stamp += 1
        entry = (-priority_weight, queued_at, key, self._next_stamp)
        self._stamps[key] = self._next_stamp
        heap = self._per_dag.setdefault(key.dag_id, [])
        heapq.heappush(heap, entry)
        self._entries += 1
        if heap[0] is entry and key.dag_id not in self._blocked:
            heapq.heappush(self._heads, (entry[:3], key.dag_id))
        if self._entries > 2 * len(self._stamps) + 1024:
            self._compact()

    def discard(self, key: TaskKey) -> None:
        self._stamps.pop(key, None)

    def peek(self, can_take: Callable[[str], bool]) -> tuple[int, datetime, TaskKey] | None:
        """The sort key (-priority_weight, queued_at, key) of the best entry whose DAG
        ``can_take`` another task, left in place (it is the head heap's top); None if none.
        Several queues' ready queues are merged by comparing their peeks."""
        while self._heads:
            sort_key, dag_id = self._heads[0]
            top = self._top(dag_id)
            if top is not None and top[:3] == sort_key:
                if can_take(dag_id):
                    return sort_key
                heapq.heappop(self._heads)
                self._blocked.add(dag_id)
                continue
            heapq.heappop(self._heads)
            if top is not None and dag_id not in self._blocked:
                # a stale head: make sure the DAG's real head is there
                heapq.heappush(self._heads, (top[:3], dag_id))
        return None

    def pop(self, can_take: Callable[[str], bool]) -> TaskKey | None:
        """Remove and return the best key whose DAG ``can_take`` another task, or None."""
        if self.peek(can_take) is None:
            return None
        _, dag_id = heapq.heappop(self._heads)  # the entry peek found, on top
        top = heapq.heappop(self._per_dag[dag_id])
        self._entries -= 1
        del self._stamps[top[2]]
        following = self._top(dag_id)
        if following is not None:
            heapq.heappush(self._heads, (following[:3], dag_id))
        return top[2]

    def unblock(self, dag_id: str) -> None:
        """The DAG may take tasks again (a slot freed, unpaused, limit raised)."""
        if dag_id in self._blocked:
            self._blocked.discard(dag_id)
            top = self._top(dag_id)
            if top is not None:
                heapq.heappush(self._heads, (top[:3], dag_id))

    def _top(self, dag_id: str) -> _ReadyEntry | None:
        heap = self._per_dag.get(dag_id)
        while heap:
            entry = heap[0]
            if self._stamps.get(entry[2]) == entry[3]:
                return entry
            heapq.heappop(heap)
            self._entries -= 1
        if heap is not None:
            del self._per_dag[dag_id]
        return None

    def _compact(self) -> None:
        for dag_id in list(self._per_dag):
            heap = [e for e in self._per_dag[dag_id] if self._stamps.get(e[2]) == e[3]]
            heapq.heapify(heap)
            if heap:
                self._per_dag[dag_id] = heap
            else:
                del self._per_dag[dag_id]
        self._entries = sum(len(h) for h in self._per_dag.values())
        self._heads = [
            (heap[0][:3], dag_id)
            for dag_id, heap in self._per_dag.items()
            if dag_id not in self._blocked
        ]
        heapq.heapify(self._heads)


K = TypeVar("K", bound=Hashable)


class TimeIndex(Generic[K]):
    """A lazy min-heap of (when, key) for time-driven work (retries, lease expiry, eviction).

    An entry counts while ``valid(key, when)`` holds; stale entries are dropped by
    :meth:`prune` (called from apply). :meth:`due` reads without changing anything, so it
    is safe from views.
    """

    def __init__(self, valid: Callable[[K, datetime], bool]) -> None:
        self._heap: list[tuple[datetime, K]] = []
        self._valid = valid

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, when: datetime, key: K) -> None:
        heapq.heappush(self._heap, (when, key))

    def prune(self, live: int) -> None:
        """Drop stale entries at the top; rebuild when stale ones outnumber ``live`` ones."""
        heap = self._heap
        while heap and not self._valid(heap[0][1], heap[0][0]):
            heapq.heappop(heap)
        if len(heap) > 2 * live + 256:
            self._heap = [(w, k) for w, k in heap if self._valid(k, w)]
            heapq.heapify(self._heap)

    def pop_due(self, now: datetime) -> Iterator[K]:
        """Remove and yield live keys whose time is <= now, earliest first."""
        heap = self._heap
        seen: set[K] = set()
        while heap and heap[0][0] <= now:
            when, key = heapq.heappop(heap)
            if key not in seen and self._valid(key, when):
                seen.add(key)
                yield key

    def due(self, now: datetime, limit: int | None = None) -> list[K]:
        """Live keys whose time is <= now, earliest first, without popping (O(k log k))."""
        heap = self._heap
        out: list[K] = []
        seen: set[K] = set()
        frontier: list[tuple[tuple[datetime, K], int]] = []
        if heap and heap[0][0] <= now:
            frontier.append((heap[0], 0))
        while frontier and (limit is None or len(out) < limit):
            (when, key), index = heapq.heappop(frontier)
            if key not in seen and self._valid(key, when):
                seen.add(key)
                out.append(key)
            for child in (2 * index + 1, 2 * index + 2):
                if child < len(heap) and heap[child][0] <= now:
                    heapq.heappush(frontier, (heap[child], child))
        return out
