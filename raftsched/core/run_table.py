"""The run table: the runs held in memory and the indexes over them.

Owns the live runs (``LiveRun``: a DagRun, the spec version it runs, its task instances) by
dag_id and run_id, the slot index (dag_id, logical_date) -> run_id, the per-DAG count of
active (QUEUED/RUNNING) runs, the finished-run index that eviction reads, the runs parked on
slots their DAG's scheduler has yet to reach, and the memory of evicted slots (slot -> when).
Guarantees: a run is in the slot index iff it is held; the active count of a DAG is the
number of its held runs not finished (kept by :meth:`add`, :meth:`count_finished`,
:meth:`count_reopened`, :meth:`evict`); each evicted slot's fingerprint
(``digest.fp_slot``) is in the shared digest sum exactly while it is remembered.
The finished index may hold stale entries (checked on read, pruned by :meth:`prune`).
Parked runs are derived, not in snapshots: after a restore the next ack parks them again.
Raises ``KeyError`` only on a bug (evicting a run that is not held).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime

from raftsched.core import digest as dg
from raftsched.core.model import (
    FINISHED_RUN_STATES,
    DagRecord,
    DagRun,
    DagSpec,
    TaskInstance,
    TaskKey,
)
from raftsched.core.ready import TimeIndex, Topology

RunKey = tuple[str, str]  # (dag_id, run_id)
Slot = tuple[str, datetime]  # (dag_id, logical_date)


class LiveRun:
    """A live run: its DagRun, the spec version it runs, its task instances."""

    __slots__ = ("row_seq", "run", "spec", "tis", "topo", "unfinished")

    def __init__(self, run: DagRun, spec: DagSpec, topo: Topology) -> None:
        self.run = run
        self.spec = spec
        self.topo = topo
        self.tis: dict[str, TaskInstance] = {}
        self.unfinished = 0
        self.row_seq = 0  # seq of the last DAG_RUN outbox entry of this run

    @property
    def key(self) -> RunKey:
        return (self.run.dag_id, self.run.run_id)


class RunTable:
    __slots__ = (
        "_active",
        "_dates",
        "_evicted_slots",
        "_finished",
        "_n_finished",
        "_parked",
        "_runs",
        "_sum",
    )

    def __init__(self, digest_sum: dg.DigestSum) -> None:
        self._sum = digest_sum
        self._runs: dict[str, dict[str, LiveRun]] = {}  # dag_id -> run_id -> run
        self._dates: dict[Slot, str] = {}  # (dag_id, logical_date) -> run_id
        # Slots of runs evicted in the last hour -> when (handlers_runs.EVICTED_SLOT_MEMORY)
        self._evicted_slots: dict[Slot, datetime] = {}
        self._active: dict[str, int] = {}
        self._n_finished = 0
        self._finished: TimeIndex[RunKey] = TimeIndex(self._finished_live)
        # Finished runs kept on slots their DAG's scheduler has yet to reach, per DAG
        self._parked: dict[str, dict[RunKey, None]] = {}

    def _finished_live(self, key: RunKey, when: datetime) -> bool:
        rec = self.get(*key)
        return rec is not None and rec.run.state in FINISHED_RUN_STATES and rec.run.end_date == when

    # -- reads ------------------------------------------------------------------------------

    def get(self, dag_id: str, run_id: str) -> LiveRun | None:
        return self._runs.get(dag_id, {}).get(run_id)

    def find(self, key: TaskKey) -> tuple[LiveRun, TaskInstance] | None:
        """The live run and task instance of ``key``; None if not held."""
        rec = self.get(key.dag_id, key.run_id)
        if rec is None:
            return None
        ti = rec.tis.get(key.task_id)
        return None if ti is None else (rec, ti)

    def records(self, dag_id: str | None = None) -> Iterator[LiveRun]:
        """Held runs (of one DAG), in insertion order."""
        groups = self._runs.values() if dag_id is None else [self._runs.get(dag_id, {})]
        for group in groups:
            yield from group.values()

    def __len__(self) -> int:
        return sum(len(group) for group in self._runs.values())

    def active_count(self, dag_id: str) -> int:
        """Runs of the DAG in QUEUED or RUNNING state."""
        return self._active.get(dag_id, 0)

    def run_at(self, dag_id: str, logical_date: datetime) -> LiveRun | None:
        """The held run of the DAG at ``logical_date``; None if none is held there."""
        run_id = self._dates.get((dag_id, logical_date))
        return None if run_id is None else self.get(dag_id, run_id)

    def slot_taken(self, dag_id: str, logical_date: datetime, run_id: str) -> bool:
        """A run holds the slot or the run id, or the slot was evicted within the memory."""
        slot = (dag_id, logical_date)
        return (
            slot in self._dates
            or slot in self._evicted_slots
            or run_id in self._runs.get(dag_id, {})
        )

    # -- changes ----------------------------------------------------------------------------

    def add(self, rec: LiveRun) -> None:
        """Hold a run (new, or restored in any state)."""
        run = rec.run
        self._runs.setdefault(run.dag_id, {})[run.run_id] = rec
        self._dates[(run.dag_id, run.logical_date)] = run.run_id
        if run.state in FINISHED_RUN_STATES:
            self._n_finished += 1
            assert run.end_date is not None
            self._finished.push(run.end_date, rec.key)
        else:
            self._active[run.dag_id] = self._active.get(run.dag_id, 0) + 1

    def count_finished(self, dag_id: str) -> None:
        """One of the DAG's active runs has just finished."""
        self._active[dag_id] -= 1
        self._n_finished += 1

    def count_reopened(self, dag_id: str) -> None:
        """One of the DAG's finished runs is running again (cleared)."""
        self._active[dag_id] = self._active.get(dag_id, 0) + 1
        self._n_finished -= 1

    def watch_finished(self, end_date: datetime, key: RunKey) -> None:
        """The run ended at ``end_date``: a candidate for eviction from then on."""
        self._finished.push(end_date, key)

    def pop_finished(self, cutoff: datetime) -> list[RunKey]:
        """Finished runs that ended at or before ``cutoff`` (out of the index)."""
        return list(self._finished.pop_due(cutoff))

    def park(self, key: RunKey) -> None:
        """Keep the finished run until its DAG's schedule passes it (:meth:`release_parked`)."""
        self._parked.setdefault(key[0], {})[key] = None

    def unpark(self, dag_id: str) -> None:
        """Back to the eviction queue with every parked run of the DAG (the next ack parks
        again those that must stay)."""
        for key in self._parked.pop(dag_id, {}):
            rec = self.get(*key)
            run = None if rec is None else rec.run
            if run is not None and run.end_date is not None and run.state in FINISHED_RUN_STATES:
                self._finished.push(run.end_date, key)

    def release_parked(self, old: DagRecord | None, new: DagRecord) -> None:
        """The DAG's record changed from ``old`` to ``new``: back to the eviction queue with
        the parked runs its schedule has now reached (all of them if the DAG's version or
        activity changed: they are looked at again)."""
        dag_id = new.spec.dag_id
        parked = self._parked.pop(dag_id, None)
        if parked is None:
            return
        same = old is not None and (old.spec.spec_hash, old.active) == (
            new.spec.spec_hash,
            new.active,
        )
        last = new.last_logical_date
        kept: dict[RunKey, None] = {}
        for key in parked:
            rec = self.get(*key)
            if rec is None or rec.run.end_date is None or rec.run.state not in FINISHED_RUN_STATES:
                continue  # gone, or running again (cleared): it is queued again when it ends
            if same and (last is None or rec.run.logical_date > last):
                kept[key] = None
            else:
                self._finished.push(rec.run.end_date, key)
        if kept:
            self._parked[dag_id] = kept

    def evict(self, rec: LiveRun, now: datetime) -> None:
        """Drop a finished run, remembering its slot (evicted at ``now``)."""
        run = rec.run
        slot = (run.dag_id, run.logical_date)
        self._evicted_slots[slot] = now
        self._sum.add(dg.fp_slot(slot, now))
        runs = self._runs[run.dag_id]
        del runs[run.run_id]
        if not runs:
            del self._runs[run.dag_id]
        del self._dates[slot]
        self._n_finished -= 1

    def forget_slots(self, before: datetime) -> None:
        """Evicted slots leave the memory in eviction order once older than ``before``."""
        slots = self._evicted_slots
        while slots:
            slot, when = next(iter(slots.items()))
            if when > before:
                break
            del slots[slot]
            self._sum.remove(dg.fp_slot(slot, when))

    def evicted_slots(self) -> Iterator[tuple[Slot, datetime]]:
        return iter(self._evicted_slots.items())

    def load_slots(self, items: Iterable[tuple[Slot, datetime]]) -> None:
        """Restore; the caller recomputes the digest."""
        self._evicted_slots = dict(items)

    def prune(self) -> None:
        """Drop stale entries of the finished index (after each command)."""
        self._finished.prune(self._n_finished)
