"""Handlers for an operator's task commands: clear (run again) and mark (success/failed).

A cleared task goes back to NONE with its tries extended (a running attempt is revoked: its
worker's next call is refused, and the task is not leased again until the revoked lease has
ended), then runs when its trigger rule allows. A mapped task (core/mapping.py) cleared
whole loses its instances and expands again from its upstream's value; one instance cleared
alone runs again, and its task waits for it once more.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from raftsched.core import commands as c
from raftsched.core import mapping, xcom
from raftsched.core import results as r
from raftsched.core import snapshot as sn
from raftsched.core.changes import emit_entry, touch_run, touch_ti
from raftsched.core.model import OutboxKind, TaskInstance, TaskState
from raftsched.core.results import Result
from raftsched.core.run_table import LiveRun
from raftsched.core.transitions import after_finish, reopen_run, set_state, settle, settle_run

if TYPE_CHECKING:
    from collections.abc import Iterable

    from raftsched.core.state import SchedulerState


def apply_clear_tasks(
    state: SchedulerState, cmd: c.ClearTasks, now: datetime, index: int
) -> Result:
    reason, rec, wanted = _run_and_tasks(state, cmd.dag_id, cmd.run_id, cmd.task_ids)
    if reason:
        return Result(False, reason, tuple(wanted))
    assert rec is not None
    targets = clear(state, rec, wanted, cmd.include_downstream, now)
    return Result(True, value=tuple(targets))


def clear(
    state: SchedulerState, rec: LiveRun, wanted: list[str], include_downstream: bool, now: datetime
) -> list[str]:
    """Clear ``wanted`` (task ids or instance ids of ``rec``, each held) and settle the run
    again: the ids cleared (ClearTasks; a reset_dag_run of a TriggerDagRunOperator,
    core/dagrun_reset.py)."""
    whole, instances = _clear_targets(rec, wanted, include_downstream)
    for task_id in whole:
        ti = rec.tis[task_id]
        if ti.map_count is not None:  # its instances go: it expands again when ready
            for child_id in mapping.instances(rec, task_id):
                child = rec.tis[child_id]
                _reset(state, rec, child, now)
                del rec.tis[child_id]
                rec.unfinished -= 1
            touch_ti(state, ti)
            ti.map_count = None
        _reset(state, rec, ti, now)
    for child_id in instances:  # one instance again: its task waits for it once more
        _reset(state, rec, rec.tis[child_id], now)
        parent = rec.tis[mapping.task_of(child_id)]
        if parent.state is not TaskState.NONE:
            touch_ti(state, parent)
            parent.end_date = None
            set_state(state, rec, parent, TaskState.NONE)
    targets = [*whole, *instances]
    reopen_run(state, rec)
    settle(state, rec, targets, now)
    settle_run(state, rec, now)
    return targets


def _clear_targets(
    rec: LiveRun, wanted: list[str], include_downstream: bool
) -> tuple[list[str], list[str]]:
    """(tasks cleared whole, instances of mapped tasks cleared alone), each sorted. An
    instance's downstream is its task's; an instance of a task cleared whole goes with it."""
    tasks = [t for t in wanted if not mapping.is_instance(t)]
    alone = [t for t in wanted if mapping.is_instance(t)]
    whole = set(tasks)
    if include_downstream:
        whole = rec.topo.descendants(tasks)
        after = [d for t in alone for d in rec.topo.downstream[mapping.task_of(t)]]
        whole |= rec.topo.descendants(after)
    instances = sorted({t for t in alone if mapping.task_of(t) not in whole})
    return sorted(whole), instances


def _reset(state: SchedulerState, rec: LiveRun, ti: TaskInstance, now: datetime) -> None:
    """``ti`` back to NONE with its tries extended, its running attempt revoked."""
    touch_ti(state, ti)
    if ti.state is TaskState.RUNNING:  # revoke: its worker's next call is refused
        state.task_queue.fence(ti)
        ti.end_date = now
        emit_entry(
            state,
            OutboxKind.TASK_INSTANCE,
            sn.ti_row(ti, TaskState.FAILED, message="cleared while running"),
        )
    set_state(state, rec, ti, TaskState.NONE)
    xcom.drop(state, ti)
    retries = rec.topo.tasks[mapping.task_of(ti.key.task_id)].retries
    ti.max_tries = ti.try_number + max(0, retries) + 1
    ti.next_retry_at = ti.queued_at = ti.start_date = ti.end_date = None
    ti.exit_code, ti.message, ti.log_chunks = None, "", 0


def apply_mark_tasks(state: SchedulerState, cmd: c.MarkTasks, now: datetime, index: int) -> Result:
    target = cmd.state
    if target not in (TaskState.SUCCESS, TaskState.FAILED):
        return Result(False, r.INVALID)
    target = TaskState(target)
    reason, rec, wanted = _run_and_tasks(state, cmd.dag_id, cmd.run_id, cmd.task_ids)
    if reason:
        return Result(False, reason, tuple(wanted))
    assert rec is not None
    for task_id in wanted:
        ti = rec.tis[task_id]
        if ti.state is target:
            continue
        touch_ti(state, ti)
        if ti.state is TaskState.RUNNING:
            state.task_queue.fence(ti)
        if ti.state not in sn.ATTEMPT_STATES:  # marking stands in for the coming attempt
            ti.try_number += 1
            ti.start_date = ti.worker_id = ti.lease_token = ti.exit_code = None
        ti.end_date, ti.next_retry_at = now, None
        ti.message = f"marked {target.value}"
        set_state(state, rec, ti, target)  # revokes a live lease
    for task_id in wanted:
        after_finish(state, rec, rec.tis[task_id], now)
    touch_run(state, rec)
    settle_run(state, rec, now)
    return Result(True, value=tuple(wanted))


def _run_and_tasks(
    state: SchedulerState, dag_id: str, run_id: str, task_ids: Iterable[str]
) -> tuple[str, LiveRun | None, list[str]]:
    rec = state.run_table.get(dag_id, run_id)
    if rec is None:
        return r.UNKNOWN_RUN, None, []
    wanted = sorted(set(task_ids)) if task_ids else sorted(rec.tis)
    if any(t not in rec.tis for t in wanted):
        return r.UNKNOWN_TASK, rec, [t for t in wanted if t not in rec.tis]
    return "", rec, wanted
