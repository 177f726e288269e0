"""Callbacks: which committed events make callback jobs, and the checks of their specs.

A task's ``callbacks`` (``TaskSpec.callbacks``) fire when one of its attempts ends: "success",
"retry" (it failed and goes up for retry) or "failure" (it failed for good). A DAG's
(``DagSpec.callbacks``) fire when a run finishes ("success", "failure") or misses its
deadline ("deadline", see ``handlers_callbacks.apply_miss_deadlines``). Each is
``(event, callable, kwargs_json)``: ``callable`` is a module-level name of the DAG file
("notify" or "Class.fn"), or a built-in notifier (``NOTIFIERS``) whose settings are
``kwargs_json``.

Apply makes the jobs inside the command that committed the event (:func:`on_task_end`,
:func:`on_run_end`), with a deterministic id (dag, run, task, try, event, index): the decision
to run a callback is committed like any other, so it is made once whichever node leads, and
a worker runs it (``handlers_callbacks``), never a scheduler node.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from raftsched.core import limits as lim
from raftsched.core import mapping, persisted
from raftsched.core.callback_table import CallbackJob
from raftsched.core.model import (
    FINISHED_RUN_STATES,
    RunState,
    TaskInstance,
    TaskState,
    utc_iso,
)
from raftsched.core.run_table import LiveRun
from raftsched.errors import LimitExceeded

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

TASK_EVENTS = frozenset({"failure", "success", "retry"})
DAG_EVENTS = frozenset({"failure", "success", "deadline", "skipped"})
NOTIFIER_PREFIX = "raftsched:"
NOTIFIERS = frozenset({"raftsched:webhook", "raftsched:email"})
MAX_CALLBACKS = 8  # per task or DAG
MAX_ALERTS_PER_TICK = 500
MAX_CONTEXT_CHARS = 16_384  # a job's context JSON (jobs are held in memory, bounded)
MAX_NOTIFIER_BYTES = 8_192  # a notifier's settings as JSON
RUN_LOG_TASK_ID = "__callbacks__"  # run-level callbacks write their output to this task log
RUN_LOG_TRY = 1

_TASK_EVENT_OF = {
    TaskState.SUCCESS: "success",
    TaskState.UP_FOR_RETRY: "retry",
    TaskState.FAILED: "failure",
}


def check_callbacks(field: str, value: object, events: frozenset[str]) -> None:
    """``value`` is a tuple of at most MAX_CALLBACKS (event, callable, kwargs_json)."""
    if not isinstance(value, tuple):
        raise LimitExceeded(field, f"must be a tuple, got {type(value).__name__}")
    lim.check_count(field, len(value), MAX_CALLBACKS)
    for i, item in enumerate(value):
        where = f"{field}[{i}]"
        if not (isinstance(item, tuple) and len(item) == 3):
            raise LimitExceeded(where, "must be an (event, callable, kwargs_json) triple")
        event, ref, kwargs_json = item
        if not isinstance(event, str) or event not in events:  # a list is unhashable
            raise LimitExceeded(f"{where}.event", f"must be one of {sorted(events)}")
        lim.check_text(f"{where}.callable", ref, lim.MAX_CALLABLE_CHARS, empty=False)
        if ref.startswith(NOTIFIER_PREFIX) and ref not in NOTIFIERS:
            raise LimitExceeded(f"{where}.callable", f"{ref[:60]!r} is not a built-in notifier")
        lim.check_text(f"{where}.kwargs_json", kwargs_json, MAX_NOTIFIER_BYTES)
        try:
            settings = lim.loads_json(kwargs_json or "{}")
        except (ValueError, RecursionError):
            raise LimitExceeded(f"{where}.kwargs_json", "is not valid JSON") from None
        lim.check_json_object(f"{where}.kwargs_json", settings, MAX_NOTIFIER_BYTES, 4)


def check_deadline(field: str, value: object) -> None:
    if value is None:
        return
    lim.check_float(field, value, 1.0, lim.MAX_DURATION_SECONDS)


def declared_connection(kwargs_json: str) -> str:
    """The connection id a notifier's settings name ("" if none): its worker may read it."""
    try:
        settings = json.loads(kwargs_json or "{}")
    except ValueError:
        return ""
    conn_id = settings.get("conn_id") if isinstance(settings, dict) else None
    return conn_id if isinstance(conn_id, str) else ""


# -- events -> jobs ------------------------------------------------------------------------


def on_task_end(state: SchedulerState, rec: LiveRun, ti: TaskInstance, now: datetime) -> None:
    """An attempt of ``ti`` ended in its current state: queue the task's callbacks for it."""
    event = _TASK_EVENT_OF.get(ti.state)
    task = rec.topo.tasks.get(mapping.task_of(ti.key.task_id))
    if event is None or task is None or not task.callbacks:
        return
    context = _context(rec, event, now)
    context.update(
        task_id=ti.key.task_id,
        try_number=ti.try_number,
        max_tries=ti.max_tries,
        state=ti.state.value,
        exit_code=ti.exit_code,
        message=ti.message,
        exception=ti.message if event != "success" else None,
    )
    where = (ti.key.task_id, ti.try_number)
    _add_jobs(state, rec, task.callbacks, event, where, str(ti.try_number), context, now)


_TIMED = "timed_out:"


def on_run_end(state: SchedulerState, rec: LiveRun, event: str, now: datetime) -> None:
    """The run finished ("success"/"failure") or missed its deadline ("deadline")."""
    if not rec.spec.callbacks:
        return
    context = _context(rec, event, now)
    failed = sorted(t for t, ti in rec.tis.items() if ti.state is TaskState.FAILED)
    # a dagrun_timeout (core/run_timeout.py TIMED_OUT) says so on the instances it skipped
    timed_out = next((t.message for t in rec.tis.values() if t.message.startswith(_TIMED)), "")
    reason = {
        "failure": timed_out
        or (f"task(s) failed: {', '.join(failed[:20])}" if failed else "the run failed"),
        "success": "",
        "deadline": f"not done {rec.spec.deadline_seconds:g}s after its logical date"
        if rec.spec.deadline_seconds
        else "its deadline passed",
    }[event]
    context.update(task_id=None, try_number=None, message=reason, exception=reason or None)
    context["state"] = rec.run.state.value
    # the run may finish again after a clear: the time tells the two events apart
    ordinal = utc_iso(now) or ""
    where = (RUN_LOG_TASK_ID, RUN_LOG_TRY)
    _add_jobs(state, rec, rec.spec.callbacks, event, where, ordinal, context, now)


def on_slots_skipped(
    state: SchedulerState,
    spec: Any,
    skipped: Any,
    now: datetime,
) -> None:
    """A schedule policy skipped a range of slots (``slot_policy.SkippedSlots``): the DAG's
    "skipped" callbacks, once per committed range (its job id names the range's last slot,
    which the schedule passes once). No run exists: the job's log goes under the run id
    ``skipped__<last slot>``."""
    mine = [cb for cb in spec.callbacks if cb[0] == "skipped"]
    if not mine:
        return
    run_id = f"skipped__{utc_iso(skipped.last)}"
    context = {
        "dag_id": spec.dag_id,
        "run_id": None,
        "event": "skipped",
        "first_slot": utc_iso(skipped.first),
        "last_slot": utc_iso(skipped.last),
        "slots": skipped.count or None,
        "reason": skipped.reason,
        "message": f"slots skipped ({skipped.reason})",
        "event_time": utc_iso(now),
    }
    for i, (_, ref, kwargs_json) in enumerate(mine):
        job = CallbackJob(
            job_id=f"{spec.dag_id}/{run_id}//skipped/{i}",
            seq=state.callbacks.next_seq(),
            dag_id=spec.dag_id,
            run_id=run_id,
            task_id="",
            try_number=0,
            event="skipped",
            callable_ref=ref,
            kwargs_json=kwargs_json,
            fileloc=spec.fileloc,
            context_json=json.dumps({**context, "callback": ref}, sort_keys=True),
            log_task_id=RUN_LOG_TASK_ID,
            log_try=RUN_LOG_TRY,
            created_at=now,
        )
        state.callbacks.add(job, now)


def missed_deadlines(
    state: SchedulerState, now: datetime, limit: int = MAX_ALERTS_PER_TICK
) -> list[tuple[str, str]]:
    """Unfinished runs past their DAG's deadline, not alerted yet, whose DAG has "deadline"
    callbacks: what the leader proposes in ``MissDeadlines`` (apply re-checks each)."""
    out: list[tuple[str, str]] = []
    # only the DAGs whose current spec has a deadline (sorted: the same order on every node)
    with_deadline = sorted(state.catalog.with_deadline)
    for rec in (rec for dag_id in with_deadline for rec in state.run_table.records(dag_id)):
        deadline = rec.spec.deadline_seconds
        if deadline is None or rec.run.state in FINISHED_RUN_STATES:
            continue
        if not any(event == "deadline" for event, _, _ in rec.spec.callbacks):
            continue
        if rec.run.logical_date + timedelta(seconds=deadline) > now:
            continue
        if not state.callbacks.alerted(rec.key):
            out.append(rec.key)
            if len(out) >= limit:
                break
    return out


def run_event_of(new: RunState) -> str:
    return "failure" if new is RunState.FAILED else "success"


def _context(rec: LiveRun, event: str, now: datetime) -> dict[str, Any]:
    run = rec.run
    return {
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "event": event,
        "logical_date": utc_iso(run.logical_date),
        "data_interval_start": utc_iso(run.data_interval_start),
        "data_interval_end": utc_iso(run.data_interval_end),
        "run_type": run.run_type.value,
        "conf": run.conf,
        "event_time": utc_iso(now),
    }


def _add_jobs(
    state: SchedulerState,
    rec: LiveRun,
    callbacks: tuple[tuple[str, str, str], ...],
    event: str,
    where: tuple[str, int],
    ordinal: str,
    context: dict[str, Any],
    now: datetime,
) -> None:
    run = rec.run
    task_id = str(context.get("task_id") or "")
    mine = [cb for cb in callbacks if cb[0] == event]
    for i, (_, ref, kwargs_json) in enumerate(mine):
        context_json = json.dumps({**context, "callback": ref}, sort_keys=True, default=str)
        if len(context_json) > MAX_CONTEXT_CHARS:  # a big conf: the job keeps the rest
            small = {**context, "callback": ref, "conf": {}, "conf_omitted": True}
            context_json = json.dumps(small, sort_keys=True, default=str)
        job = CallbackJob(
            job_id=f"{run.dag_id}/{run.run_id}/{task_id}/{ordinal}/{event}/{i}",
            seq=state.callbacks.next_seq(),
            dag_id=run.dag_id,
            run_id=run.run_id,
            task_id=task_id,
            try_number=int(context.get("try_number") or 0),
            event=event,
            callable_ref=ref,
            kwargs_json=kwargs_json,
            fileloc=rec.spec.fileloc,
            context_json=context_json,
            log_task_id=where[0],
            log_try=where[1],
            created_at=now,
        )
        if state.callbacks.add(job, now):
            persisted.emit_job(state, job)
