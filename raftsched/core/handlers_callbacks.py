"""Handlers for callback jobs: lease, complete, and the deadline alerts; and their checks.

Jobs are made by apply where the event commits (``core.callbacks``); a worker leases them
(:func:`apply_lease_callbacks`, fenced like task leases: the token is the command's log
index), runs the callable and reports (:func:`apply_complete_callback`), whose output lands
in the log its job names (the task's log at the event's try; ``__callbacks__`` for a
run-level one). A lease that expires (its worker died) is leasable again, at most
``callback_table.MAX_ATTEMPTS`` leases in all; a reported outcome is final, a failure
included, so a callback that did its work is never run again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from raftsched.core import commands as c
from raftsched.core import limits as lim
from raftsched.core import persisted
from raftsched.core import results as r
from raftsched.core.callback_table import FAILED, RUNNING, SUCCESS, CallbackJob
from raftsched.core.callbacks import on_run_end
from raftsched.core.changes import emit_entry
from raftsched.core.model import FINISHED_RUN_STATES, OutboxKind, utc_iso
from raftsched.core.results import Item, Result
from raftsched.errors import LimitExceeded

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

UNKNOWN_CALLBACK = "unknown_callback"  # no such job held (never made, or long finished)
ALREADY_ALERTED = "already_alerted"  # the run's deadline alert is committed already
NO_DEADLINE = "no_deadline"  # the run's DAG has no deadline
# A callback's log chunks are numbered far above any attempt's own (an attempt writes fewer
# than a million chunks), LOG_SEQ_SLOT per job, so two jobs on one log never collide.
LOG_SEQ_BASE = 1_000_000_000
LOG_SEQ_SLOT = 200
MAX_JOB_ID_CHARS = 1_100


def grant_dict(job: CallbackJob) -> dict[str, Any]:
    """What the worker gets of a leased job (plain values: results are snapshotted)."""
    return {
        "job_id": job.job_id,
        "token": job.token,
        "dag_id": job.dag_id,
        "run_id": job.run_id,
        "task_id": job.task_id,
        "try_number": job.try_number,
        "event": job.event,
        "callable_ref": job.callable_ref,
        "kwargs_json": job.kwargs_json,
        "fileloc": job.fileloc,
        "context_json": job.context_json,
        "attempt": job.attempts,
        "expires_at": utc_iso(job.expires_at),
    }


def apply_lease_callbacks(
    state: SchedulerState, cmd: c.LeaseCallbacks, now: datetime, index: int
) -> Result:
    if state.outbox.is_full():
        return Result(False, r.OUTBOX_FULL, state.outbox_size)
    state.callbacks.evict_done(now)  # finished jobs past their retention leave
    expires_at = now + timedelta(seconds=cmd.lease_ttl_seconds)
    grants: list[dict[str, Any]] = []
    for job in list(state.callbacks.leasable(now)):
        if len(grants) >= cmd.max_jobs:
            break
        leased = state.callbacks.lease(job, cmd.worker_id, index, expires_at, now)
        if job.state == RUNNING:  # its worker died (or was cut off) before it reported
            then = "leased again" if leased is not None else "given up: the callback failed"
            _log(
                state, job, [f"--- the lease of worker {job.worker_id} expired: {then} ---\n"], now
            )
        persisted.emit_job(state, leased or state.callbacks.get(job.job_id))
        if leased is not None:
            grants.append(grant_dict(leased))
    return Result(True, value=tuple(grants))


def apply_complete_callback(
    state: SchedulerState, cmd: c.CompleteCallback, now: datetime, index: int
) -> Result:
    job = state.callbacks.get(cmd.job_id)
    if job is None:
        return Result(False, UNKNOWN_CALLBACK)
    if job.state != RUNNING or job.token != cmd.token:
        return Result(False, r.STALE_TOKEN)
    if job.worker_id != cmd.worker_id:
        return Result(False, r.WRONG_WORKER)
    message = lim.clean_text(cmd.message[: lim.MAX_MESSAGE_CHARS])
    verdict = "succeeded" if cmd.success else f"failed: {message or 'no message'}"
    texts = [f"--- {job.event} callback {job.callable_ref} (attempt {job.attempts}) ---\n"]
    texts += [chunk.text for chunk in cmd.chunks]
    texts.append(f"--- {job.event} callback {job.callable_ref} {verdict} ---\n")
    if not state.outbox.is_full():  # the outcome still lands; only its output is lost
        _log(state, job, texts, now)
    done = state.callbacks.finish(job, SUCCESS if cmd.success else FAILED, message, now)
    persisted.emit_job(state, done)
    return Result(True, value=done.state)


def _log(state: SchedulerState, job: CallbackJob, texts: list[str], now: datetime) -> None:
    base = LOG_SEQ_BASE + (job.seq % 5_000_000) * LOG_SEQ_SLOT + job.attempts * 30
    for i, text in enumerate(texts[:29]):
        emit_entry(
            state,
            OutboxKind.TASK_LOG,
            {
                "dag_id": job.dag_id,
                "run_id": job.run_id,
                "task_id": job.log_task_id,
                "try_number": job.log_try,
                "chunk_seq": base + i,
                "stream": "stdout",
                "text": lim.clean_text(text[: lim.MAX_LOG_CHUNK_CHARS]),
                "created_at": utc_iso(now),
            },
        )


def apply_miss_deadlines(
    state: SchedulerState, cmd: c.MissDeadlines, now: datetime, index: int
) -> Result:
    table = state.callbacks
    table.forget_alerts(lambda ref: state.run_table.get(*ref) is not None)
    items = []
    for dag_id, run_id in cmd.runs:
        rec = state.run_table.get(dag_id, run_id)
        if rec is None:
            items.append(Item(False, r.UNKNOWN_RUN))
            continue
        deadline = rec.spec.deadline_seconds
        if rec.run.state in FINISHED_RUN_STATES:
            items.append(Item(False, r.STATE_CHANGED))
        elif deadline is None:
            items.append(Item(False, NO_DEADLINE))
        elif now < rec.run.logical_date + timedelta(seconds=deadline):
            items.append(Item(False, r.NOT_DUE))
        elif table.alerted(rec.key):
            items.append(Item(False, ALREADY_ALERTED))
        else:
            table.alert(rec.key, now)
            on_run_end(state, rec, "deadline", now)
            items.append(Item(True))
    return Result.of_items(items)


# -- checks (core.validate registers them) ----------------------------------------------------


def _lease_check(cmd: c.LeaseCallbacks) -> None:
    lim.check_id("worker_id", cmd.worker_id)
    lim.check_int("max_jobs", cmd.max_jobs, 1, lim.MAX_LEASES_PER_CALL)
    lim.check_float(
        "lease_ttl_seconds",
        cmd.lease_ttl_seconds,
        lim.MIN_LEASE_TTL_SECONDS,
        lim.MAX_LEASE_TTL_SECONDS,
    )


def _complete_check(cmd: c.CompleteCallback) -> None:
    lim.check_id("worker_id", cmd.worker_id)
    lim.check_text("job_id", cmd.job_id, MAX_JOB_ID_CHARS, empty=False)
    lim.check_int("token", cmd.token, 0, lim.MAX_TOKEN)
    if not isinstance(cmd.success, bool):
        raise LimitExceeded("success", "must be a boolean")
    _text("message", cmd.message)
    if not isinstance(cmd.chunks, tuple):
        raise LimitExceeded("chunks", "must be a tuple")
    lim.check_count("chunks", len(cmd.chunks), lim.MAX_LOG_CHUNKS_PER_CALL)
    for i, chunk in enumerate(cmd.chunks):
        if not isinstance(chunk, c.LogChunk) or chunk.stream not in ("stdout", "stderr"):
            raise LimitExceeded(f"chunks[{i}]", "must be a stdout or stderr LogChunk")
        _text(f"chunks[{i}].text", chunk.text)


def _text(field: str, value: object) -> None:
    """Output: sanitized and cut by apply, only its type and a generous size checked."""
    if not isinstance(value, str):
        raise LimitExceeded(field, f"must be a string, got {type(value).__name__}")
    if len(value) > lim.MAX_OUTPUT_TEXT_CHARS:
        raise LimitExceeded(field, f"is longer than {lim.MAX_OUTPUT_TEXT_CHARS} characters")


def _miss_check(cmd: c.MissDeadlines) -> None:
    if not isinstance(cmd.runs, tuple):
        raise LimitExceeded("runs", "must be a tuple")
    lim.check_count("runs", len(cmd.runs), lim.MAX_ITEMS_PER_COMMAND)
    for i, ref in enumerate(cmd.runs):
        if not (isinstance(ref, tuple) and len(ref) == 2):
            raise LimitExceeded(f"runs[{i}]", "must be a (dag_id, run_id) pair")
        lim.check_id(f"runs[{i}].dag_id", ref[0])
        lim.check_id(f"runs[{i}].run_id", ref[1])


CHECKS: dict[type, Callable[[Any], None]] = {
    c.LeaseCallbacks: _lease_check,
    c.CompleteCallback: _complete_check,
    c.MissDeadlines: _miss_check,
}

HANDLERS: dict[type, Callable[[Any, Any, datetime, int], Result]] = {
    c.LeaseCallbacks: apply_lease_callbacks,
    c.CompleteCallback: apply_complete_callback,
    c.MissDeadlines: apply_miss_deadlines,
}
