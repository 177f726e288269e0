"""The task/run transitions every handler shares (live runs are ``run_table.LiveRun``).

:func:`set_state` is the one place a task instance changes state: it keeps the derived
indexes right (those of ``task_queue``, and a run's count of unfinished tasks).
:func:`settle` applies trigger rules downstream of a change (queueing what is ready, ruling
out what can never run) and :func:`settle_run` finishes a run whose tasks are all done.
Callers touch (``changes.touch_ti``) what they change before changing it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from raftsched.core import callbacks as cb
from raftsched.core import mapping, past_deps
from raftsched.core import snapshot as sn
from raftsched.core.changes import emit_entry, set_dag, touch_run, touch_ti
from raftsched.core.limits import MAX_PAUSE_NOTE_CHARS, MAX_TRY_NUMBER
from raftsched.core.model import (
    FINISHED_RUN_STATES,
    FINISHED_TASK_STATES,
    OutboxKind,
    RunState,
    TaskInstance,
    TaskKey,
    TaskState,
)
from raftsched.core.ready import UpstreamCounts, Verdict, evaluate_trigger, next_retry_at
from raftsched.core.run_table import LiveRun, RunKey
from raftsched.core.skip_causes import paused_changed
from raftsched.core.trigger_table import Trigger

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

ENDED_MESSAGE = "ended by the DAG's overlap policy"  # core/run_ending.py: not a failure
EMPTY_KIND = "empty"  # a task the scheduler finishes itself (docs/architecture.md §19)
EMPTY_MESSAGE = "finished by the scheduler: an empty task runs nothing"

__all__ = ["LiveRun", "RunKey", "find", "set_state", "settle", "settle_run"]


def find(state: SchedulerState, key: TaskKey) -> tuple[LiveRun, TaskInstance] | None:
    return state.run_table.find(key)


def set_state(state: SchedulerState, rec: LiveRun, ti: TaskInstance, new: TaskState) -> None:
    """Move ``ti`` to ``new``, keeping every derived index right. The caller has touched
    ``ti`` and set what the new state needs (lease, queued_at, next_retry_at)."""
    old = ti.state
    if old is new:
        return
    state.task_queue.leave(ti, old)
    if old is TaskState.RUNNING:
        state.pools.release(ti.key)  # its pool slots are free (core/pool_table.py)
        ti.lease = None
        if new is not TaskState.QUEUED:  # a released lease keeps its resume for the next one
            ti.resume_json = None
    elif old is TaskState.DEFERRED:  # fired, timed out, cleared or marked: its trigger goes
        state.triggers.drop(ti.key)
    if new is TaskState.NONE:
        ti.resume_json = None
    was_done, is_done = old in FINISHED_TASK_STATES, new in FINISHED_TASK_STATES
    if was_done != is_done:
        rec.unfinished += -1 if is_done else 1
    ti.state = new
    task = rec.topo.tasks[mapping.task_of(ti.key.task_id)]
    if new is TaskState.RUNNING:
        state.pools.occupy(ti.key, task)
    state.task_queue.enter(ti, new, task.priority_weight, task.queue, task.pool)


def defer(
    state: SchedulerState,
    rec: LiveRun,
    ti: TaskInstance,
    now: datetime,
    *,
    kind: str,
    args_json: str,
    method_name: str,
    kwargs_json: str,
    timeout_at: datetime | None,
    message: str,
) -> None:
    """``ti``'s attempt waits on a new trigger and holds no worker slot: DEFERRED, with its
    try given back (the resume is not a retry). The caller checked the trigger table's room."""
    ti.message = message
    ti.max_tries = min(ti.max_tries + 1, MAX_TRY_NUMBER)
    state.triggers.add(
        Trigger(
            dag_id=ti.key.dag_id,
            run_id=ti.key.run_id,
            task_id=ti.key.task_id,
            try_number=ti.try_number,
            kind=kind,
            args_json=args_json,
            method_name=method_name,
            kwargs_json=kwargs_json,
            fileloc=rec.spec.fileloc,
            created_at=now,
            timeout_at=timeout_at,
        )
    )
    set_state(state, rec, ti, TaskState.DEFERRED)


def queue(state: SchedulerState, rec: LiveRun, ti: TaskInstance, now: datetime) -> None:
    touch_ti(state, ti)
    ti.queued_at = now
    ti.next_retry_at = None
    if ti.message.startswith(past_deps.WAITING):  # no longer held back by the previous run
        ti.message = ""
    set_state(state, rec, ti, TaskState.QUEUED)


def trigger_verdict(state: SchedulerState, rec: LiveRun, task_id: str) -> Verdict:
    task = rec.topo.tasks[task_id]
    ups = UpstreamCounts.of(rec.tis[u].state for u in rec.topo.upstream[task_id])
    return evaluate_trigger(task.trigger_rule, ups)


def settle(state: SchedulerState, rec: LiveRun, task_ids: Iterable[str], now: datetime) -> None:
    """Queue the given NONE tasks whose trigger rule is met; rule out (UPSTREAM_FAILED,
    SKIPPED) those that can never run, and go on downstream of those."""
    work = deque(task_ids)
    while work:
        ti = rec.tis[work.popleft()]
        if ti.state is not TaskState.NONE:
            continue
        if mapping.is_instance(ti.key.task_id):  # exists once its task is ready (cleared)
            _make_ready(state, rec, ti, now, work)
            continue
        if ti.map_count is not None:  # expanded: its instances decide (after_finish)
            continue
        verdict = trigger_verdict(state, rec, ti.key.task_id)
        if verdict is Verdict.READY and not past_deps.met(state.run_table, rec, ti.key.task_id):
            why = past_deps.why_waiting(state.run_table, rec, ti.key.task_id)
            if ti.message != why:  # said once: the task page and `tasks list` show why
                touch_ti(state, ti)
                ti.message = why
            continue  # the previous run holds it back; its change settles it (after_finish)
        if verdict is Verdict.READY and rec.topo.tasks[ti.key.task_id].expand_json:
            if not expand(state, rec, ti, now):
                work.extend(rec.topo.downstream[ti.key.task_id])
        elif verdict is Verdict.READY:
            _make_ready(state, rec, ti, now, work)
        elif verdict is not Verdict.WAIT:
            touch_ti(state, ti)
            ti.end_date = now
            set_state(state, rec, ti, TaskState(verdict.value))
            work.extend(rec.topo.downstream[ti.key.task_id])


def _make_ready(
    state: SchedulerState, rec: LiveRun, ti: TaskInstance, now: datetime, work: deque[str]
) -> None:
    """Queue the ready ``ti``; an empty task (kind "empty", Airflow's EmptyOperator) is not
    queued but finished SUCCESS in this same apply, so it never takes a worker, a slot or a
    lease, and ``work`` goes on with what depends on it (a loop, not recursion: a chain of
    1,000 empty tasks settles in one apply)."""
    task_id = mapping.task_of(ti.key.task_id)
    if rec.topo.tasks[task_id].kind != EMPTY_KIND:
        queue(state, rec, ti, now)
        return
    touch_ti(state, ti)
    ti.queued_at = ti.start_date = ti.end_date = now
    ti.next_retry_at = None
    ti.try_number += 1  # its DB row is that try's, as an attempt's
    ti.message = EMPTY_MESSAGE
    set_state(state, rec, ti, TaskState.SUCCESS)
    cb.on_task_end(state, rec, ti, now)
    if not mapping.is_instance(ti.key.task_id) or _finish_mapped(state, rec, task_id, now):
        work.extend(rec.topo.downstream[task_id])


def expand(state: SchedulerState, rec: LiveRun, ti: TaskInstance, now: datetime) -> bool:
    """The mapped task ``ti`` is ready: create its instances, queued (True); or, with
    nothing to map over or past its bounds, end it SKIPPED or FAILED with the reason
    (False: the caller settles its downstream)."""
    task_id = ti.key.task_id
    count, reason = mapping.map_length(rec, rec.topo.tasks[task_id])
    touch_ti(state, ti)
    if not count:
        ti.end_date = now
        ti.message = f"mapped task failed: {reason}" if reason else "mapped over 0 items"
        ti.try_number += 1 if reason else 0  # its row, as an attempt's (snapshot.ti_row)
        set_state(state, rec, ti, TaskState.FAILED if reason else TaskState.SKIPPED)
        return False
    ti.map_count = count
    ti.message = f"mapped into {count} instances"
    retries = max(0, rec.topo.tasks[task_id].retries)
    for index in range(count):
        child_id = mapping.instance_id(task_id, index)
        child = TaskInstance(TaskKey(ti.key.dag_id, ti.key.run_id, child_id))
        child.max_tries = retries + 1
        rec.tis[child.key.task_id] = child
        rec.unfinished += 1
        state.changes.touch_new_ti(child.key)
        queue(state, rec, child, now)
    return True


def after_finish(state: SchedulerState, rec: LiveRun, ti: TaskInstance, now: datetime) -> None:
    """``ti`` just finished: settle what depends on it. An instance of a mapped task gives
    its task the instances' joint state once the last is done, and that task's downstream
    is settled then."""
    task_id, index = mapping.split_id(ti.key.task_id)
    if index < 0:
        settle(state, rec, rec.topo.downstream[task_id], now)
        _settle_next_run(state, rec, task_id, now)
        return
    if _finish_mapped(state, rec, task_id, now):
        settle(state, rec, rec.topo.downstream[task_id], now)
        _settle_next_run(state, rec, task_id, now)


def _finish_mapped(state: SchedulerState, rec: LiveRun, task_id: str, now: datetime) -> bool:
    """The mapped task ``task_id`` takes its instances' joint state once the last is done
    (True: it did, its downstream is to be settled)."""
    parent = rec.tis.get(task_id)
    if parent is None or parent.state is not TaskState.NONE or parent.map_count is None:
        return False
    joint = mapping.joint_state(rec, task_id)
    if joint is None:
        return False
    touch_ti(state, parent)
    parent.end_date = now
    # its outcome stands in for an attempt (as MarkTasks does): its DB row is that try's
    parent.try_number += 0 if joint is TaskState.SKIPPED else 1
    set_state(state, rec, parent, joint)
    return True


def _settle_next_run(state: SchedulerState, rec: LiveRun, task_id: str, now: datetime) -> None:
    """``task_id`` of ``rec`` finished: the run after it may have been waiting on it
    (depends_on_past, wait_for_downstream: core/past_deps.py)."""
    record = state.catalog.get(rec.run.dag_id)
    if not (past_deps.uses_past(rec.spec) or past_deps.uses_past(record and record.spec)):
        return
    following = past_deps.next_run(state.run_table, rec)
    if following is not None:
        waiting = [t for t in past_deps.waiting_on(rec, task_id) if t in following.tis]
        settle(state, following, waiting, now)
        settle_run(state, following, now)


def finish_task(
    state: SchedulerState, rec: LiveRun, ti: TaskInstance, target: TaskState, now: datetime
) -> None:
    """An attempt of ``ti`` ended in ``target`` (its callbacks fire: core/callbacks.py)."""
    set_state(state, rec, ti, target)
    cb.on_task_end(state, rec, ti, now)
    after_finish(state, rec, ti, now)
    settle_run(state, rec, now)


def settle_run(state: SchedulerState, rec: LiveRun, now: datetime, failed: bool = False) -> None:
    """A run whose tasks are all finished is FAILED if a leaf failed (or ``failed``: a
    dagrun_timeout, core/run_timeout.py), else SUCCESS."""
    if rec.unfinished:
        return
    run = rec.run
    bad = (TaskState.FAILED, TaskState.UPSTREAM_FAILED)
    failed = failed or any(rec.tis[t].state in bad for t in rec.topo.leaves)
    new = RunState.FAILED if failed else RunState.SUCCESS
    if run.state is new:
        return
    touch_run(state, rec)
    if run.state not in FINISHED_RUN_STATES:
        state.run_table.count_finished(run.dag_id)
    run.state = new
    run.start_date = run.start_date or now
    run.end_date = now
    state.run_table.watch_finished(now, rec.key)
    if past_deps.uses_past(rec.spec):  # the run before it may leave memory now (past_deps.keeps)
        state.run_table.unpark(run.dag_id)
    cb.on_run_end(state, rec, cb.run_event_of(new), now)
    if new is RunState.FAILED and not any(t.message == ENDED_MESSAGE for t in rec.tis.values()):
        _pause_on_failure(state, run.dag_id, run.run_id, now)


def _pause_on_failure(state: SchedulerState, dag_id: str, run_id: str, now: datetime) -> None:
    """A DAG whose current spec says pause_on_failure is paused by its failed run (Temporal's
    pause_on_failure), with a note naming the run; one already paused keeps its own note."""
    record = state.catalog.get(dag_id)
    if record is None or record.paused or not record.spec.pause_on_failure:
        return
    note = f"paused after run {run_id} failed"[:MAX_PAUSE_NOTE_CHARS]
    gaps = paused_changed(record.gaps, True, now, state.cluster_version)  # skip_causes
    set_dag(state, replace(record, paused=True, pause_note=note, gaps=gaps), emit=True, now=now)


def reopen_run(state: SchedulerState, rec: LiveRun) -> None:
    run = rec.run
    if run.state in FINISHED_RUN_STATES:
        touch_run(state, rec)
        run.state = RunState.RUNNING
        run.end_date = None
        state.run_table.count_reopened(run.dag_id)


def fail_attempt(state: SchedulerState, rec: LiveRun, ti: TaskInstance, now: datetime) -> None:
    """The running attempt failed (the caller touched ``ti`` and set its outcome)."""
    if ti.try_number < ti.max_tries:
        emit_entry(state, OutboxKind.TASK_INSTANCE, sn.ti_row(ti, TaskState.FAILED))
        task = rec.topo.tasks[mapping.task_of(ti.key.task_id)]
        ti.next_retry_at = next_retry_at(task, ti.try_number, now)
        set_state(state, rec, ti, TaskState.UP_FOR_RETRY)
        cb.on_task_end(state, rec, ti, now)
    else:
        finish_task(state, rec, ti, TaskState.FAILED, now)
