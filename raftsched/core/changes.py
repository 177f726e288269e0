"""Change tracking: how one command's effects reach the digest and the outbox.

A handler *touches* an entity before changing it (:func:`touch_ti`, :func:`touch_run`; a DAG
record is replaced whole with :func:`set_dag`): its old digest contribution is subtracted and
whether it needs an outbox row is noted in the :class:`ChangeSet`. :func:`flush` ends the
command: it writes the outbox rows of changed task instances, then runs, and re-adds the
digest contributions of everything touched. Eviction of finished runs is in
``handlers_runs``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from raftsched.core import digest as dg
from raftsched.core import snapshot as sn
from raftsched.core.digest_sum import DigestSum
from raftsched.core.model import DagRecord, OutboxKind, TaskInstance, TaskKey

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState
    from raftsched.core.transitions import LiveRun, RunKey


class ChangeSet:
    """The entities changed by the command being applied (key -> write an outbox row?), and
    their share of the digest while they change.

    Guarantees: an entity is in the set from its first touch in a command until
    :meth:`clear`; its old digest contribution is subtracted exactly once, at that first
    touch, and its new one added once, by :meth:`add_ti` / :meth:`add_run` / :meth:`add_dag`
    in :func:`flush`. Raises nothing.
    """

    __slots__ = ("_sum", "dags", "runs", "tis")

    def __init__(self, digest_sum: DigestSum) -> None:
        self._sum = digest_sum
        self.tis: dict[TaskKey, bool] = {}
        self.runs: dict[RunKey, bool] = {}
        self.dags: set[str] = set()

    def touch_ti(self, ti: TaskInstance, emit: bool = True) -> None:
        """Before ``ti`` changes (``emit``: it needs an outbox row)."""
        if ti.key not in self.tis:
            self._sum.remove(dg.fp_ti, ti)
            self.tis[ti.key] = emit
        elif emit:
            self.tis[ti.key] = True

    def touch_new_ti(self, key: TaskKey) -> None:
        """A task instance just created: an outbox row, nothing to subtract."""
        self.tis[key] = True

    def touch_run(self, rec: LiveRun, emit: bool = True) -> None:
        """Before the run changes (``emit``: it needs an outbox row)."""
        if rec.key not in self.runs:
            self._sum.remove(dg.fp_run, rec.run, rec.spec.spec_hash, rec.row_seq)
            self.runs[rec.key] = emit
        elif emit:
            self.runs[rec.key] = True

    def touch_new_run(self, key: RunKey) -> None:
        """A run just created: an outbox row, nothing to subtract."""
        self.runs[key] = True

    def touch_dag(self, dag_id: str, old: DagRecord | None) -> None:
        """Before the DAG's record ``old`` (None: none yet) is replaced."""
        if dag_id not in self.dags and old is not None:
            self._sum.remove(dg.fp_dag, dag_id, old)
        self.dags.add(dag_id)

    def add_ti(self, ti: TaskInstance) -> None:
        self._sum.add(dg.fp_ti, ti)

    def add_run(self, rec: LiveRun) -> None:
        self._sum.add(dg.fp_run, rec.run, rec.spec.spec_hash, rec.row_seq)

    def add_dag(self, dag_id: str, record: DagRecord) -> None:
        self._sum.add(dg.fp_dag, dag_id, record)

    def clear(self) -> None:
        self.tis.clear()
        self.runs.clear()
        self.dags.clear()


class ChangeFeed:
    """Which runs changed since a reader last looked, for readers that keep a copy of the
    state and recopy only what changed (``cluster/read_view.py``: a copy of every live run
    held the node's lock, and so stalled apply, for up to 0.6 s at 10,000 live runs).

    A run is noted when a command touched it or one of its task instances (its creation and
    eviction included): exactly what the digest follows, so a change the feed missed would
    also be a digest bug, which the digest tests catch. Not replicated state: in no digest and
    no snapshot, and a state built by a restore starts without history.

    :meth:`drain` answers the keys noted since the drain that returned ``epoch``, or None when
    it cannot say (the first drain, another reader drained in between, more than :data:`CAP`
    keys piled up, or a command stopped half-way): the reader then copies everything.
    """

    CAP = 100_000  # keys kept before the feed gives up (nobody read for a long time)

    __slots__ = ("_complete", "_keys", "epoch")

    def __init__(self) -> None:
        self._keys: set[RunKey] = set()
        self._complete = False  # the keys since the last drain are all in _keys
        self.epoch = 0  # drains so far

    def note(self, key: RunKey) -> None:
        if self._complete:
            self._keys.add(key)
            if len(self._keys) > self.CAP:
                self.lose_track()

    def lose_track(self) -> None:
        self._keys = set()
        self._complete = False

    def drain(self, epoch: int) -> set[RunKey] | None:
        keys = self._keys if self._complete and epoch == self.epoch else None
        self._keys = set()
        self._complete = True
        self.epoch += 1
        return keys


def emit_entry(state: SchedulerState, kind: OutboxKind, data: dict) -> int:
    return state.outbox.emit(kind, data)


def touch_ti(state: SchedulerState, ti: TaskInstance, emit: bool = True) -> None:
    state.changes.touch_ti(ti, emit)


def touch_run(state: SchedulerState, rec: LiveRun, emit: bool = True) -> None:
    state.changes.touch_run(rec, emit)


def set_dag(
    state: SchedulerState, record: DagRecord, emit: bool, now: datetime | None = None
) -> None:
    """Replace the DAG's record (``emit``: with a DAG outbox row, stamped ``now``)."""
    dag_id = record.spec.dag_id
    old = state.catalog.get(dag_id)
    state.changes.touch_dag(dag_id, old)
    if emit:
        record = replace(record, updated_at=now)
    state.catalog.put(record)
    state.run_table.release_parked(old, record)
    if emit:
        emit_entry(state, OutboxKind.DAG, sn.dag_row(record))


def flush(state: SchedulerState) -> None:
    """End of a command: write outbox rows of changed TIs then runs; re-add digests."""
    changes = state.changes
    feed = state.change_feed
    for key, emit in changes.tis.items():
        feed.note((key.dag_id, key.run_id))
        ti = state.task_instance(key)
        if ti is not None:
            if emit:
                emit_entry(state, OutboxKind.TASK_INSTANCE, sn.ti_row(ti))
            changes.add_ti(ti)
    for (dag_id, run_id), emit in changes.runs.items():
        feed.note((dag_id, run_id))
        rec = state.run_table.get(dag_id, run_id)
        if rec is not None:
            if emit:
                rec.row_seq = emit_entry(state, OutboxKind.DAG_RUN, sn.run_row(rec.run))
            changes.add_run(rec)
    for dag_id in changes.dags:
        record = state.catalog.get(dag_id)
        assert record is not None  # DAG records are never dropped
        changes.add_dag(dag_id, record)
    changes.clear()
