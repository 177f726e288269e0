"""The due index: which DAGs have scheduled runs to create, at O(due work * log n) per tick.

The leader keeps one ``DueIndex`` beside the replicated state (it is derived data: rebuild it
from the state's DAGs after winning an election) and calls ``collect`` every tick. Pure: time
arrives as ``now``; no clock, I/O or threads (and not thread-safe: one leader loop owns it).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from raftsched.core.commands import RunDecision
from raftsched.core.model import DagSpec
from raftsched.core.skip_causes import Gap
from raftsched.core.slot_policy import ONE_AT_A_TIME, plan, planned_start, runs_left
from raftsched.core.timetable import Timetable, timetable_for


@dataclass(slots=True)
class _Entry:
    spec: DagSpec
    timetable: Timetable
    last_logical_date: datetime | None
    paused: bool
    next_fire: datetime | None = None
    version: int = 0
    scheduled_runs: int = 0  # DagRecord.scheduled_runs (for max_runs)
    cancel_sent: bool = False  # cancel_other: a cancel of the active run committed
    gaps: tuple[Gap, ...] = ()  # DagRecord.gaps: why slots were missed (skip_causes)


class DueIndex:
    """A heap of (next_fire_time, dag_id) with lazy invalidation.

    Contract:

    - ``upsert(spec, last_logical_date=, paused=)`` adds or replaces a DAG. ``last_logical_date``
      is the logical date of the DAG's latest *scheduled* run (None: none yet). O(log n).
    - ``remove(dag_id)``: the DAG is gone (no-op if unknown). O(1); its heap entry goes stale.
    - ``collect(now, capacity=, limit=)`` returns the RunDecisions due at ``now``: per DAG in
      logical-date order, at most ``capacity(dag_id)`` of them (max_active_runs minus its
      active runs), at most ``limit`` in all. catchup=False yields only the latest missed slot.
      ``collect`` does not advance anything: a decision is returned again on later calls
      until ``mark_created`` (or ``upsert`` with a newer last_logical_date) records it. A DAG
      whose capacity is 0 is parked until the next ``collect`` (one pop and one push, O(log n),
      per tick) and is left out of ``next_wakeup``.
    - ``mark_created(dag_id, logical_date)``: call after commit for each decision that is now a
      run (created, or refused because that run already exists). Advances the DAG. O(log n).
    - ``next_wakeup()``: the earliest fire time among DAGs not parked at capacity (it may be in
      the past when ``limit`` cut a tick short), or None. The leader sleeps until then, or
      until a run finishes (capacity frees), whichever comes first.

    ``pops`` counts heap pops since creation (tests use it to check the cost per tick).
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._heap: list[tuple[datetime, str, int]] = []
        self._parked: list[tuple[datetime, str, int]] = []
        self._stale = 0
        self._versions = 0  # every (re)scheduling gets a fresh version: older heap items go stale
        self.pops = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, dag_id: object) -> bool:
        return dag_id in self._entries

    def upsert(
        self,
        spec: DagSpec,
        *,
        last_logical_date: datetime | None,
        paused: bool,
        scheduled_runs: int = 0,
        gaps: tuple[Gap, ...] = (),
    ) -> None:
        old = self._entries.get(spec.dag_id)
        if old is not None and old.spec.spec_hash == spec.spec_hash and spec.spec_hash:
            timetable = old.timetable
        else:
            timetable = timetable_for(spec)
        self._versions += 1
        entry = _Entry(
            spec,
            timetable,
            last_logical_date,
            paused,
            version=self._versions,
            scheduled_runs=scheduled_runs,
            gaps=gaps,
        )
        if old is not None and old.next_fire is not None:
            self._stale += 1
        self._entries[spec.dag_id] = entry
        self._schedule(entry)

    def remove(self, dag_id: str) -> None:
        entry = self._entries.pop(dag_id, None)
        if entry is not None and entry.next_fire is not None:
            self._stale += 1

    def mark_created(self, dag_id: str, logical_date: datetime, *, run: bool = True) -> None:
        """``run``: a scheduled run was created (False: slots were skipped up to it)."""
        entry = self._entries.get(dag_id)
        if entry is None:
            return
        if entry.last_logical_date is not None and logical_date <= entry.last_logical_date:
            return
        entry.last_logical_date = logical_date
        entry.cancel_sent = False
        if run and entry.spec.max_runs is not None:
            entry.scheduled_runs += 1
        if entry.next_fire is not None:
            self._stale += 1
        self._versions += 1
        entry.version = self._versions
        self._schedule(entry)

    def mark_cancelled(self, dag_id: str) -> None:
        """cancel_other: the DAG's active run was cancelled (committed); not again until the
        DAG's record changes or a run is created."""
        entry = self._entries.get(dag_id)
        if entry is not None:
            entry.cancel_sent = True

    def last_logical_date(self, dag_id: str) -> datetime | None:
        entry = self._entries.get(dag_id)
        return entry.last_logical_date if entry else None

    def next_wakeup(self) -> datetime | None:
        while self._heap and not self._is_live(self._heap[0]):
            heapq.heappop(self._heap)
            self.pops += 1
            self._stale -= 1
        return self._heap[0][0] if self._heap else None

    def collect(
        self,
        now: datetime,
        *,
        capacity: Callable[[str], int],
        limit: int,
        busy: Callable[[str], bool] | None = None,
        record_skips: bool = False,
        leader_gap: Gap | None = None,
    ) -> list[RunDecision]:
        """See the class doc; ``leader_gap``: this leader's leaderless stretch before its
        term (``skip_causes.leader_gap``), labels the slots a catch-up policy drops in it."""
        for item in self._parked:
            heapq.heappush(self._heap, item)
        self._parked.clear()
        decisions: list[RunDecision] = []
        keep: list[tuple[datetime, str, int]] = []
        while self._heap and self._heap[0][0] <= now and len(decisions) < limit:
            item = heapq.heappop(self._heap)
            self.pops += 1
            if not self._is_live(item):
                self._stale -= 1
                continue
            entry = self._entries[item[1]]
            spec = entry.spec
            if busy is not None and busy(spec.dag_id):
                self._parked.append(item)
                continue
            room = min(capacity(spec.dag_id), limit - len(decisions))
            # at capacity, a one-at-a-time overlap policy still decides (it may skip slots)
            if room <= 0 and spec.overlap not in ONE_AT_A_TIME:
                self._parked.append(item)
                continue
            planned = plan(
                spec,
                entry.timetable,
                last=entry.last_logical_date,
                now=now,
                room=max(0, room),
                limit=limit - len(decisions),
                scheduled_runs=entry.scheduled_runs,
                record_skips=record_skips,
                cancel_sent=entry.cancel_sent,
                gaps=entry.gaps if leader_gap is None else (*entry.gaps, leader_gap),
            )
            if not planned:
                self._parked.append(item)
                continue
            keep.append(item)
            decisions.extend(planned)
        for item in keep:
            heapq.heappush(self._heap, item)
        self._compact()
        return decisions

    # -- internals ---------------------------------------------------------------------------
    def _schedule(self, entry: _Entry) -> None:
        entry.next_fire = None
        if entry.paused or runs_left(entry.spec, entry.scheduled_runs) == 0:
            return
        when = entry.timetable.next_time(entry.last_logical_date)
        if when is None:
            return
        when = planned_start(entry.spec, when)  # jitter: wake at the run's planned start
        entry.next_fire = when
        heapq.heappush(self._heap, (when, entry.spec.dag_id, entry.version))

    def _is_live(self, item: tuple[datetime, str, int]) -> bool:
        entry = self._entries.get(item[1])
        return entry is not None and entry.version == item[2] and entry.next_fire is not None

    def _compact(self) -> None:
        """Rebuild the heap when stale entries outnumber live ones (keeps memory O(n))."""
        if self._stale <= max(64, len(self._heap) // 2):
            return
        self._heap = [item for item in self._heap if self._is_live(item)]
        heapq.heapify(self._heap)
        self._stale = 0


def due_fields(record: Any) -> dict[str, Any]:
    """What the index keeps of a committed ``DagRecord`` (``DueIndex.upsert``'s keywords)."""
    last, runs = record.last_logical_date, record.scheduled_runs
    return {
        "last_logical_date": last,
        "paused": record.paused,
        "scheduled_runs": runs,
        "gaps": record.gaps,
    }
