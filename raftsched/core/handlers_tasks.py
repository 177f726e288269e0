"""Handlers for task commands: queue, lease, heartbeat, complete, release, expire, append
logs (clear and mark: ``handlers_marks``).

Leases are fenced: a lease's token is the Raft log index of the command that granted it, and
every call about a lease must present the current token (a stale one is refused). A paused
DAG's tasks are not leased; max_active_tasks is per DAG across its runs (Airflow 2), read from
the current spec.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from raftsched.core import commands as c
from raftsched.core import dagrun_trigger, mapping, past_deps, xcom
from raftsched.core import results as r
from raftsched.core import snapshot as sn
from raftsched.core.changes import emit_entry, touch_run, touch_ti
from raftsched.core.handlers_assets import on_task_success
from raftsched.core.limits import MAX_LOG_CHUNK_CHARS, MAX_MESSAGE_CHARS, clean_text
from raftsched.core.model import Lease, OutboxKind, RunState, TaskInstance, TaskKey, TaskState
from raftsched.core.pool_table import DEFAULT_POOL, pool_of, slots_of
from raftsched.core.ready import Verdict
from raftsched.core.results import Item, LeaseGrant, Result
from raftsched.core.run_table import LiveRun
from raftsched.core.transitions import (
    EMPTY_KIND,
    fail_attempt,
    find,
    finish_task,
    queue,
    set_state,
    settle,
    settle_run,
    trigger_verdict,
)

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

LOG_STREAMS = frozenset({"stdout", "stderr"})
_LOGS_DROPPED = "(its last log output was dropped: the outbox was at its hard cap)"


def apply_queue_tasks(
    state: SchedulerState, cmd: c.QueueTasks, now: datetime, index: int
) -> Result:
    items = []
    for decision in cmd.items:
        items.append(_queue_one(state, decision, now))
    for key, target in cmd.unreachable:
        items.append(_rule_out(state, key, target, now))
    return Result.of_items(items)


def _queue_one(state: SchedulerState, decision: c.QueueDecision, now: datetime) -> Item:
    found = find(state, decision.key)
    if found is None:
        return Item(False, r.UNKNOWN_TASK)
    rec, ti = found
    if ti.state != decision.expected_state or ti.try_number != decision.try_number:
        return Item(False, r.STATE_CHANGED)
    if ti.state is TaskState.UP_FOR_RETRY:
        assert ti.next_retry_at is not None
        if ti.next_retry_at > now:
            return Item(False, r.NOT_DUE)
    elif ti.state is TaskState.NONE:
        if ti.map_count is not None:  # expanded: its instances are queued themselves
            return Item(False, r.NOT_READY)
        task = rec.topo.tasks[mapping.task_of(ti.key.task_id)]
        if mapping.is_instance(ti.key.task_id) or task.expand_json or task.kind == EMPTY_KIND:
            if not mapping.is_instance(ti.key.task_id) and (
                trigger_verdict(state, rec, ti.key.task_id) is not Verdict.READY
            ):
                return Item(False, r.NOT_READY)
            settle(state, rec, [ti.key.task_id], now)  # queues an instance, expands a task,
            # finishes an empty one
            settle_run(state, rec, now)
            return Item(True)
        if trigger_verdict(state, rec, ti.key.task_id) is not Verdict.READY or not (
            past_deps.met(state.run_table, rec, ti.key.task_id)  # depends_on_past & co
        ):
            return Item(False, r.NOT_READY)
    else:
        return Item(False, r.INVALID)
    queue(state, rec, ti, now)
    return Item(True)


def _rule_out(state: SchedulerState, key: TaskKey, target: TaskState, now: datetime) -> Item:
    found = find(state, key)
    if found is None:
        return Item(False, r.UNKNOWN_TASK)
    rec, ti = found
    if target not in (TaskState.UPSTREAM_FAILED, TaskState.SKIPPED):
        return Item(False, r.INVALID)
    if mapping.is_instance(key.task_id):  # an instance is never ruled out: its task is
        return Item(False, r.INVALID)
    if ti.state is not TaskState.NONE or ti.map_count is not None:
        return Item(False, r.STATE_CHANGED)
    if trigger_verdict(state, rec, key.task_id).value != target:
        return Item(False, r.NOT_READY)
    settle(state, rec, [key.task_id], now)
    settle_run(state, rec, now)
    return Item(True)


def apply_lease_tasks(
    state: SchedulerState, cmd: c.LeaseTasks, now: datetime, index: int
) -> Result:
    if state.outbox.is_full():
        return Result(False, r.OUTBOX_FULL, state.outbox_size)
    expires_at = now + timedelta(seconds=cmd.lease_ttl_seconds)
    grants = []
    fenced: list[tuple[LiveRun, TaskInstance]] = []  # and those too big for their pool now
    can_take = partial(_can_take, state)
    queues = getattr(cmd, "queues", ())  # absent in entries of older releases
    short: set[str] = set()  # pools whose head needs more slots than they have free now
    pool_open = partial(_pool_open, state, short)
    while len(grants) < cmd.max_tasks:
        key = state.task_queue.pop_ready(can_take, queues, pool_open)
        if key is None:
            break
        rec, ti = find(state, key) or (None, None)
        assert rec is not None and ti is not None
        if state.task_queue.still_fenced(key, now):
            fenced.append((rec, ti))
            continue
        task = rec.topo.tasks[mapping.task_of(key.task_id)]
        room = state.pools.room(pool_of(task))
        if room is not None and slots_of(task) > room:  # back in line; its pool is passed
            fenced.append((rec, ti))  # over for the rest of this command (Airflow skips it)
            short.add(pool_of(task))
            continue
        touch_ti(state, ti)
        ti.try_number += 1
        ti.lease = Lease(key, ti.try_number, cmd.worker_id, index, expires_at)
        ti.worker_id, ti.lease_token = cmd.worker_id, index
        ti.start_date, ti.end_date, ti.exit_code, ti.message = now, None, None, ""
        ti.log_chunks = 0
        set_state(state, rec, ti, TaskState.RUNNING)
        state.task_queue.watch_expiry(expires_at, key)
        run = rec.run
        if run.state is RunState.QUEUED:
            touch_run(state, rec)
            run.state, run.start_date = RunState.RUNNING, now
        grants.append(
            LeaseGrant(
                lease=ti.lease,
                task=rec.topo.tasks[mapping.task_of(key.task_id)],
                fileloc=rec.spec.fileloc,
                logical_date=run.logical_date,
                data_interval_start=run.data_interval_start,
                data_interval_end=run.data_interval_end,
                conf=dict(run.conf),
                max_tries=ti.max_tries,
                params_json=rec.spec.params_json,
                resume_json=ti.resume_json or "",
            )
        )
    for rec, ti in fenced:  # back in line, in their old places (same weight and queued_at)
        assert ti.queued_at is not None
        weight = rec.topo.tasks[mapping.task_of(ti.key.task_id)].priority_weight
        state.task_queue.requeue(ti.key, weight, ti.queued_at)
    return Result(True, value=tuple(grants))


def _pool_open(state: SchedulerState, short: set[str], pool: str) -> bool:
    """Whether a lane of ``pool`` ("": default_pool) may grant another task now: the pool
    has a free slot (never more than its slots are held: core/pool_table.py)."""
    name = pool or DEFAULT_POOL
    return name not in short and state.pools.has_room(name)


def _can_take(state: SchedulerState, dag_id: str) -> bool:
    record = state.catalog.get(dag_id)
    if record is None:
        return True
    running = state.task_queue.running_count(dag_id)
    return not record.paused and running < record.spec.max_active_tasks


def apply_heartbeat_leases(
    state: SchedulerState, cmd: c.HeartbeatLeases, now: datetime, index: int
) -> Result:
    items = []
    for ref in cmd.leases:
        reason, _, ti = _current_lease(state, ref)
        if reason:
            items.append(Item(False, reason))
            continue
        assert ti is not None and ti.lease is not None
        lease = ti.lease
        if lease.worker_id != cmd.worker_id:
            items.append(Item(False, r.WRONG_WORKER))
            continue
        expires_at = max(lease.expires_at, now + timedelta(seconds=cmd.lease_ttl_seconds))
        if expires_at != lease.expires_at:
            touch_ti(state, ti, emit=False)
            ti.lease = replace(lease, expires_at=expires_at)
            state.task_queue.watch_expiry(expires_at, ti.key)
        items.append(Item(True, "", expires_at))
    return Result.of_items(items)


def apply_complete_attempt(
    state: SchedulerState, cmd: c.CompleteAttempt, now: datetime, index: int
) -> Result:
    reason, rec, ti = _current_lease(state, c.LeaseRef(cmd.key, cmd.token), _holder(cmd))
    if reason:
        return Result(False, reason)
    assert rec is not None and ti is not None
    message = clean_text(cmd.message[:MAX_MESSAGE_CHARS])
    if cmd.chunks and state.outbox.is_full():  # the outcome still lands, so running work can finish
        message = (message + " " if message else "") + _LOGS_DROPPED
    else:
        _append_logs(state, ti, cmd.chunks, now)
    touch_ti(state, ti)
    ti.end_date, ti.exit_code, ti.message = now, cmd.exit_code, message
    result_json, follow = getattr(cmd, "result_json", ""), getattr(cmd, "follow", None)
    refusal = xcom.outcome_refusal(rec, ti, result_json, follow) if cmd.success else ""
    skipped = cmd.success and getattr(cmd, "skipped", False)
    wait = ""  # a TriggerDagRunOperator(wait_for_completion=True) waits for its run
    if cmd.success and not refusal and not skipped and _triggers(rec, ti):
        result_json, wait = dagrun_trigger.trigger(state, result_json, now, index, ti.key)
        refusal = result_json[1:] if result_json.startswith("!") else ""
        if result_json.startswith(dagrun_trigger.SKIP):  # the run exists: skipped instead
            ti.message, skipped = clean_text(result_json[1:][:MAX_MESSAGE_CHARS]), True
    if refusal:  # a return value past the run's bound, a branch to a stranger: it fails
        ti.message = clean_text(refusal[:MAX_MESSAGE_CHARS])
        fail_attempt(state, rec, ti, now)
    elif skipped:
        finish_task(state, rec, ti, TaskState.SKIPPED, now)
    elif wait:  # the run exists; the task is DEFERRED on it, holding no worker slot
        dagrun_trigger.defer(state, rec, ti, result_json, wait, now)
    elif cmd.success:
        xcom.keep(rec, ti, result_json)
        if follow is not None:
            xcom.skip_unfollowed(state, rec, ti, follow, now)
        finish_task(state, rec, ti, TaskState.SUCCESS, now)
        # its outlets' events, with the extras the attempt set, in this same apply
        on_task_success(state, rec, ti, now, getattr(cmd, "outlet_extras", ()))
    else:
        fail_attempt(state, rec, ti, now)
    return Result(True, value=ti.state)


def _triggers(rec: LiveRun, ti: TaskInstance) -> bool:
    """Is ``ti`` a TriggerDagRunOperator's (its success creates a run)?"""
    return getattr(rec.topo.tasks[mapping.task_of(ti.key.task_id)], "trigger_dagrun", False)


def apply_release_leases(
    state: SchedulerState, cmd: c.ReleaseLeases, now: datetime, index: int
) -> Result:
    items = []
    for ref in cmd.leases:
        reason, rec, ti = _current_lease(state, ref)
        if not reason and ti is not None and ti.lease and ti.lease.worker_id != cmd.worker_id:
            reason = r.WRONG_WORKER
        if reason:
            items.append(Item(False, reason))
            continue
        assert rec is not None and ti is not None
        touch_ti(state, ti)
        ti.try_number -= 1  # handed back unstarted: not an attempt
        ti.start_date = ti.worker_id = ti.lease_token = None
        set_state(state, rec, ti, TaskState.QUEUED)  # keeps its queued_at: front of line
        items.append(Item(True))
    return Result.of_items(items)


def apply_expire_leases(
    state: SchedulerState, cmd: c.ExpireLeases, now: datetime, index: int
) -> Result:
    items = []
    for ref in cmd.leases:
        reason, rec, ti = _current_lease(state, ref)
        if not reason and ti is not None and ti.lease and ti.lease.expires_at > now:
            reason = r.NOT_EXPIRED
        if reason:
            items.append(Item(False, reason))
            continue
        assert rec is not None and ti is not None and ti.lease is not None
        touch_ti(state, ti)
        ti.end_date, ti.exit_code = now, None
        ti.message = f"lease expired (worker {ti.lease.worker_id})"
        fail_attempt(state, rec, ti, now)
        items.append(Item(True, "", ti.state))
    return Result.of_items(items)


def apply_append_logs(
    state: SchedulerState, cmd: c.AppendLogs, now: datetime, index: int
) -> Result:
    reason, _, ti = _current_lease(state, c.LeaseRef(cmd.key, cmd.token), _holder(cmd))
    if reason:
        return Result(False, reason)
    assert ti is not None
    if cmd.chunks and state.outbox.is_full():
        return Result(False, r.OUTBOX_FULL, state.outbox_size)
    _append_logs(state, ti, cmd.chunks, now)
    return Result(True, value=ti.log_chunks)


def _current_lease(
    state: SchedulerState, ref: c.LeaseRef, holder: str = ""
) -> tuple[str, LiveRun | None, TaskInstance | None]:
    """The live lease ``ref`` names; with ``holder``, only if that worker holds it."""
    found = find(state, ref.key)
    if found is None:
        return r.UNKNOWN_TASK, None, None
    rec, ti = found
    if ti.state is not TaskState.RUNNING or ti.lease is None or ti.lease.token != ref.token:
        return r.STALE_TOKEN, rec, ti
    if holder and ti.lease.worker_id != holder:
        return r.WRONG_WORKER, rec, ti
    return "", rec, ti


def _holder(cmd: c.CompleteAttempt | c.AppendLogs) -> str:
    return getattr(cmd, "worker_id", "")  # absent in entries written by older releases


def _append_logs(
    state: SchedulerState, ti: TaskInstance, chunks: Iterable[c.LogChunk], now: datetime
) -> None:
    for chunk in chunks:
        touch_ti(state, ti, emit=False)
        ti.log_chunks += 1
        key = ti.key
        emit_entry(
            state,
            OutboxKind.TASK_LOG,
            {
                "dag_id": key.dag_id,
                "run_id": key.run_id,
                "task_id": key.task_id,
                "try_number": ti.try_number,
                "chunk_seq": ti.log_chunks,
                "stream": chunk.stream,
                "text": clean_text(chunk.text[:MAX_LOG_CHUNK_CHARS]),
                "created_at": sn.utc_iso(now),
            },
        )
