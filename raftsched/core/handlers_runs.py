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
from typing import TYPE_CHECKING, Any

from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core import snapshot as sn
from raftsched.core.callbacks import on_slots_skipped
from raftsched.core.changes import emit_entry, set_dag, touch_run, touch_ti
from raftsched.core.handlers_dags import is_aware
from raftsched.core.model import (
    DagRecord,
    DagRun,
    DagSpec,
    OutboxKind,
    RunType,
    TaskInstance,
    TaskKey,
)
from raftsched.core.past_deps import keeps
from raftsched.core.results import Item, Result
from raftsched.core.run_ending import CANCEL, end_active_runs
from raftsched.core.run_table import LiveRun
from raftsched.core.run_terms import noted
from raftsched.core.slot_policy import (
    ending_refusal,
    max_active,
    planned_start,
    record_skip,
    runs_left,
    skip_refusal,
)
from raftsched.core.timetable import timetable_for
from raftsched.core.transitions import settle, settle_run
from raftsched.core.validate import check_run_decision

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState


def apply_create_runs(
    state: SchedulerState, cmd: c.CreateRuns, now: datetime, index: int
) -> Result:
    leader = getattr(cmd, "leader", ())
    return Result.of_items([_create_run(state, d, now, leader) for d in cmd.runs])


def _create_run(
    state: SchedulerState, d: c.RunDecision, now: datetime, leader: tuple[Any, ...] = ()
) -> Item:
    try:
        check_run_decision(d)
    except Exception as err:  # LimitExceeded; or a malformed value of another release
        return Item(False, r.INVALID, str(err))
    record = state.catalog.get(d.dag_id)
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
    if d.skip_reason:
        return _skip_slots(state, d, record, start, logical, now)
    run_id = d.run_id or f"{run_type.value}__{sn.utc_iso(logical)}"
    last = record.last_logical_date
    if state.run_table.slot_taken(d.dag_id, logical, run_id) or (
        scheduled and last is not None and logical <= last
    ):
        if scheduled and (last is None or logical > last):  # the slot is taken: move on
            set_dag(state, replace(record, last_logical_date=logical), emit=False)
        return Item(False, r.RUN_EXISTS)
    if scheduled and record.paused:
        return Item(False, r.PAUSED)
    if scheduled and runs_left(record.spec, record.scheduled_runs) == 0:
        return Item(False, r.MAX_RUNS)
    if scheduled and record.spec.jitter_seconds and now < planned_start(record.spec, logical):
        return Item(False, r.NOT_DUE)  # jitter: its planned start has not come
    if d.end_active:  # cancel_other / terminate_other: the active runs end first
        why_not = ending_refusal(record.spec, d.end_active, scheduled)
        if why_not:
            return Item(False, r.POLICY, why_not)
        ended = end_active_runs(state, d.dag_id, d.end_active, now)
        if d.end_active == CANCEL:  # the slot waits for the cancelled run to end
            return Item(True, r.UNCHANGED if not ended else "", "cancelled")
    if scheduled and state.active_run_count(d.dag_id) >= max_active(record.spec):
        return Item(False, r.MAX_ACTIVE_RUNS)
    spec = state.catalog.ref_spec(record.spec)
    run = DagRun(d.dag_id, run_id, logical, start, end, run_type, conf=dict(d.conf))
    run.created_at = now
    rec = LiveRun(run, spec, state.catalog.topology(spec.spec_hash))
    for task in spec.tasks:
        ti = TaskInstance(TaskKey(d.dag_id, run_id, task.task_id))
        ti.max_tries = max(0, task.retries) + 1
        rec.tis[task.task_id] = ti
        state.changes.touch_new_ti(ti.key)
    rec.unfinished = len(rec.tis)
    state.run_table.add(rec)
    state.changes.touch_new_run(rec.key)
    if scheduled:
        counted = record.scheduled_runs + (record.spec.max_runs is not None)
        terms = noted(record.terms, leader, logical)  # which term made it (run_terms)
        changed = replace(record, last_logical_date=logical, scheduled_runs=counted, terms=terms)
        set_dag(state, changed, emit=False)
    settle(state, rec, list(rec.tis), now)
    settle_run(state, rec, now)
    return Item(True, "", run_id)


create_run = _create_run  # a trigger task's outcome creates its run (core/dagrun_trigger.py)


def _skip_slots(
    state: SchedulerState,
    d: c.RunDecision,
    record: DagRecord,
    first: datetime,
    last: datetime,
    now: datetime,
) -> Item:
    """A skip decision: slots ``first``..``last`` get no run; the schedule moves past them.
    Refused (nothing changes) when the DAG's policy does not give that reason now, or the
    schedule already passed ``first`` (a stale or repeated decision)."""
    if d.run_type is not RunType.SCHEDULED or first > last or last > now:
        return Item(False, r.INVALID, "a skip covers past scheduled slots, oldest first")
    if record.last_logical_date is not None and first <= record.last_logical_date:
        return Item(False, r.RUN_EXISTS)
    if record.paused:
        return Item(False, r.PAUSED)
    active = state.active_run_count(d.dag_id)
    why_not = skip_refusal(
        record.spec, d.skip_reason, last, now, active, first=first, gaps=record.gaps
    )
    if why_not:
        return Item(False, r.POLICY, why_not)
    skips = record_skip(record.skipped, first, last, d.skipped_slots, d.skip_reason, now)
    set_dag(state, replace(record, last_logical_date=last, skipped=skips), emit=False)
    on_slots_skipped(state, record.spec, skips[-1], now)  # on_skipped_callback, once
    # the DB keeps every range (the record only the newest): `dags explain` reads it there
    emit_entry(state, OutboxKind.SKIPPED_SLOTS, {"dag_id": d.dag_id, **skips[-1].to_dict()})
    return Item(True, "", d.skip_reason)


def evict_run(state: SchedulerState, rec: LiveRun, now: datetime) -> None:
    touch_run(state, rec, emit=False)
    for ti in rec.tis.values():
        touch_ti(state, ti, emit=False)
        state.task_queue.drop_fence(ti.key)
    state.run_table.evict(rec, now)
    state.catalog.unref_spec(rec.spec.spec_hash)


def apply_ack_materialized(
    state: SchedulerState, cmd: c.AckMaterialized, now: datetime, index: int
) -> Result:
    reason = state.outbox.ack(cmd.seq)
    if reason:
        return Result(False, reason)
    cutoff = now - timedelta(seconds=max(0.0, cmd.finished_run_retention_seconds))
    evicted = 0
    table = state.run_table
    for key in table.pop_finished(cutoff):
        rec = table.get(*key)
        assert rec is not None
        if rec.row_seq > state.outbox.acked_seq:
            assert rec.run.end_date is not None
            table.watch_finished(rec.run.end_date, key)
        elif _holds_a_future_slot(state, rec.run) or keeps(table, rec, _current(state, rec)):
            # parked until the DAG's schedule passes it (changes.set_dag releases it), or
            # while the run after it may ask for it (depends_on_past; settle_run releases it)
            table.park(key)
        else:
            evict_run(state, rec, now)
            evicted += 1
    table.forget_slots(now - EVICTED_SLOT_MEMORY)
    return Result(True, value=evicted)


def _current(state: SchedulerState, rec: LiveRun) -> DagSpec | None:
    record = state.catalog.get(rec.run.dag_id)
    return None if record is None else record.spec


def _holds_a_future_slot(state: SchedulerState, run: DagRun) -> bool:
    """Is ``run`` (manual) on a slot the scheduler has yet to reach? It must stay in memory
    until then: it is what makes the scheduler's run for that slot RUN_EXISTS (the DB, unique
    on dag_id + logical_date, would refuse a second run and stop the materializer)."""
    if run.run_type is RunType.SCHEDULED:
        return False
    record = state.catalog.get(run.dag_id)
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
