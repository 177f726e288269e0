"""Handlers for run commands: create runs, and evict finished runs once materialized.

- Scheduled runs are refused when the DAG is paused or at max_active_runs, and for a slot at
  or before the DAG's last scheduled logical date (covers runs already evicted from memory).
  Manual runs (trigger, backfill) are accepted while paused and beyond max_active_runs (they
  count towards it); a paused DAG's tasks are not leased until it is unpaused (Airflow). A
  manual run for the date of a run evicted from memory is refused for an hour after the
  eviction (``EVICTED_SLOT_MEMORY``); older slots are in the DB, which the API looks at first.
  So apply, not the DB's unique (dag_id, logical_date), refuses a second run for a slot.
- A run executes the DAG version it was created with; a new run queues its root tasks.
- A finished run leaves memory when the materializer has acknowledged its last row and it is
  older than the retention window (``AckMaterialized``), unless it is a manual run on a slot
  the scheduler has yet to reach: it stays until the scheduler passes that slot.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import results as r
from raftsched.core import snapshot as sn
from raftsched.core.handlers_dags import is_aware, ref_spec, unref_spec
from raftsched.core.model import DagRun, RunType, TaskInstance, TaskKey
from raftsched.core.outbox import ack, set_dag, touch_run, touch_ti
from raftsched.core.results import Item, Result
from raftsched.core.timetable import timetable_for
from raftsched.core.transitions import LiveRun, settle, settle_run
from raftsched.core.validate import check_run_decision

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState


def apply_create_runs(
    state: SchedulerState, cmd: c.CreateRuns, now: datetime, index: int
) -> Result:
    return Result.of_items([_create_run(state, d, now) for d in cmd.runs])


def _create_run(state: SchedulerState, d: c.RunDecision, now: datetime) -> Item:
    try:
        check_run_decision(d)
    except Exception as err:  # LimitExceeded; or a malformed value of another release
        return Item(False, r.INVALID, str(err))
    record = state._dags.get(d.dag_id)
    if record is None:
        return Item(False, r.UNKNOWN_DAG)
    if not record.active:
        return Item(False, r.INACTIVE_DAG)
    dates = (d.logical_date, d.data_interval_start, d.data_interval_end)
    if not all(is_aware(x) for x in dates) or not isinstance(d.conf, dict):
        return Item(False, r.INVALID)
    try:
        run_type = RunType(d.run_type)
    except ValueError:
        return Item(False, r.INVALID)
    logical, start, end = (x.astimezone(UTC) for x in dates)
    scheduled = run_type is RunType.SCHEDULED
    run_id = d.run_id or f"{run_type.value}__{sn.utc_iso(logical)}"
    last = record.last_logical_date
    if (
        (d.dag_id, logical) in state._dates
        or (d.dag_id, logical) in state._evicted_slots
        or run_id in state._runs.get(d.dag_id, {})
        or (scheduled and last is not None and logical <= last)
    ):
        if scheduled and (last is None or logical > last):  # the slot is taken: move on
            set_dag(state, replace(record, last_logical_date=logical), emit=False)
        return Item(False, r.RUN_EXISTS)
    if scheduled and record.paused:
        return Item(False, r.PAUSED)
    if scheduled and state.active_run_count(d.dag_id) >= record.spec.max_active_runs:
        return Item(False, r.MAX_ACTIVE_RUNS)
    spec = ref_spec(state, record.spec)
    run = DagRun(d.dag_id, run_id, logical, start, end, run_type, conf=dict(d.conf))
    run.created_at = now
    rec = LiveRun(run, spec, state._topologies[spec.spec_hash])
    for task in spec.tasks:
        ti = TaskInstance(TaskKey(d.dag_id, run_id, task.task_id))
        ti.max_tries = max(0, task.retries) + 1
        rec.tis[task.task_id] = ti
        state._dirty_tis[ti.key] = True  # new: nothing to subtract from the digest
    rec.unfinished = len(rec.tis)
    state._runs.setdefault(d.dag_id, {})[run_id] = rec
    state._dates[(d.dag_id, logical)] = run_id
    state._active_runs[d.dag_id] = state._active_runs.get(d.dag_id, 0) + 1
    state._dirty_runs[rec.key] = True
    if scheduled:
        set_dag(state, replace(record, last_logical_date=logical), emit=False)
    settle(state, rec, list(rec.tis), now)
    settle_run(state, rec, now)
    return Item(True, "", run_id)


def evict_run(state: SchedulerState, rec: LiveRun, now: datetime) -> None:
    run = rec.run
    slot = (run.dag_id, run.logical_date)
    state._evicted_slots[slot] = now
    state._sum.add(dg.fp_slot(slot, now))
    touch_run(state, rec, emit=False)
    for ti in rec.tis.values():
        touch_ti(state, ti, emit=False)
        until = state._fences.pop(ti.key, None)
        if until is not None:
            state._sum.remove(dg.fp_fence(ti.key, until))
    runs = state._runs[run.dag_id]
    del runs[run.run_id]
    if not runs:
        del state._runs[run.dag_id]
    del state._dates[(run.dag_id, run.logical_date)]
    state._n_finished_runs -= 1
    unref_spec(state, rec.spec.spec_hash)


def apply_ack_materialized(
    state: SchedulerState, cmd: c.AckMaterialized, now: datetime, index: int
) -> Result:
    reason = ack(state, cmd.seq)
    if reason:
        return Result(False, reason)
    cutoff = now - timedelta(seconds=max(0.0, cmd.finished_run_retention_seconds))
    evicted = 0
    for key in list(state._finished.pop_due(cutoff)):
        rec = state._runs[key[0]][key[1]]
        if rec.row_seq > state._acked_seq:
            assert rec.run.end_date is not None
            state._finished.push(rec.run.end_date, key)
        elif _holds_a_future_slot(state, rec.run):
            # parked until the DAG's schedule passes it (outbox.set_dag releases it)
            state._parked.setdefault(key[0], {})[key] = None
        else:
            evict_run(state, rec, now)
            evicted += 1
    _forget_slots(state, now - EVICTED_SLOT_MEMORY)
    return Result(True, value=evicted)


def _forget_slots(state: SchedulerState, before: datetime) -> None:
    """Evicted slots leave the memory in eviction order once older than the window."""
    slots = state._evicted_slots
    while slots:
        slot, when = next(iter(slots.items()))
        if when > before:
            break
        del slots[slot]
        state._sum.remove(dg.fp_slot(slot, when))


def _holds_a_future_slot(state: SchedulerState, run: DagRun) -> bool:
    """Is ``run`` (manual) on a slot the scheduler has yet to reach? It must stay in memory
    until then: it is what makes the scheduler's run for that slot RUN_EXISTS (the DB, unique
    on dag_id + logical_date, would refuse a second run and stop the materializer)."""
    if run.run_type is RunType.SCHEDULED:
        return False
    record = state._dags.get(run.dag_id)
    if record is None or not record.active:
        return False
    last = record.last_logical_date
    if last is not None and run.logical_date <= last:
        return False
    slot = timetable_for(record.spec).next_slot(run.logical_date - _JUST_BEFORE)
    return slot is not None and slot.logical_date == run.logical_date


_JUST_BEFORE = timedelta(microseconds=1)

# How long the slot of an evicted run stays known to apply. The DB holds every evicted run
# (eviction waits for the ack), and TriggerDag/BackfillDag look there before they propose; this
# memory closes the window between that look and the commit (seconds), with a wide margin.
EVICTED_SLOT_MEMORY = timedelta(hours=1)
