"""Handlers for deferred tasks and their triggers: defer, lease, heartbeat, fire, time out;
and their checks (docs/architecture.md §17).

A worker holding a task's lease ends the attempt with :func:`apply_defer_task`: the task is
DEFERRED and its trigger is held in ``core.trigger_table``. Triggerer processes lease
triggers (:func:`apply_lease_triggers`, fenced like task leases: the token is the command's
log index), renew them, and report a firing (:func:`apply_fire_triggers`) only under a live,
current lease: a firing is consumed once, because the trigger leaves with it, so a repeat or
a stale triggerer's is refused. The fired task is queued again, and its next lease carries
the event (``TaskInstance.resume_json``); that attempt is a new one, and the deferral gave
back the try it used (``max_tries`` + 1), so deferring never spends a retry. A trigger that
raised, or one past its timeout, fails the attempt that deferred (retries apply). An asset
watcher's trigger (``core/asset_watchers``) fires an asset event instead, and is re-armed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from raftsched.core import asset_watchers as aw
from raftsched.core import commands as c
from raftsched.core import dagrun_trigger, xcom
from raftsched.core import limits as lim
from raftsched.core import results as r
from raftsched.core import snapshot as sn
from raftsched.core.changes import emit_entry, touch_ti
from raftsched.core.handlers_assets import on_task_success
from raftsched.core.handlers_tasks import _append_logs, _current_lease, _triggers
from raftsched.core.model import OutboxKind, TaskKey, TaskState, utc_iso
from raftsched.core.results import Item, Result
from raftsched.core.transitions import defer, fail_attempt, find, finish_task, queue
from raftsched.core.trigger_table import Trigger
from raftsched.errors import LimitExceeded

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

UNKNOWN_TRIGGER = "unknown_trigger"  # no trigger held for that task (fired, timed out, cleared)
TOO_MANY_TRIGGERS = "too_many_triggers"

MAX_TRIGGER_KIND_CHARS = 300  # "file", or "user:<module>.<Class>"
MAX_TRIGGER_ARGS_BYTES = 16_384  # a trigger's arguments as compact JSON
MAX_TRIGGER_DEPTH = 16
MAX_METHOD_CHARS = lim.MAX_CALLABLE_CHARS
MIN_TRIGGER_TIMEOUT_SECONDS = 1.0
MAX_TRIGGER_ERROR_CHARS = 65_536  # a raising trigger's traceback (into the task's log)


def grant_dict(trigger: Trigger) -> dict[str, Any]:
    """What the triggerer gets of a leased trigger (plain values: results are snapshotted)."""
    return {
        "dag_id": trigger.dag_id,
        "run_id": trigger.run_id,
        "task_id": trigger.task_id,
        "try_number": trigger.try_number,
        "token": trigger.token,
        "kind": trigger.kind,
        "args_json": trigger.args_json,
        "fileloc": trigger.fileloc,
        "created_at": utc_iso(trigger.created_at),
        "timeout_at": utc_iso(trigger.timeout_at),
        "expires_at": utc_iso(trigger.expires_at),
    }


def apply_defer_task(state: SchedulerState, cmd: c.DeferTask, now: datetime, index: int) -> Result:
    reason, rec, ti = _current_lease(state, c.LeaseRef(cmd.key, cmd.token), cmd.worker_id)
    if reason:
        return Result(False, reason)
    assert rec is not None and ti is not None
    if not state.outbox.is_full():
        _append_logs(state, ti, cmd.chunks, now)
    touch_ti(state, ti)
    ti.end_date, ti.exit_code = now, None
    if not state.triggers.room_for(cmd.key.dag_id):
        ti.message = (
            "could not defer: too many deferred tasks (at most 10,000 per DAG, 100,000 in all)"
        )
        fail_attempt(state, rec, ti, now)
        return Result(True, TOO_MANY_TRIGGERS, ti.state)
    timeout = cmd.timeout_seconds
    defer(
        state,
        rec,
        ti,
        now,
        kind=cmd.kind,
        args_json=cmd.args_json,
        method_name=cmd.method_name,
        kwargs_json=cmd.kwargs_json,
        timeout_at=None if timeout is None else now + timedelta(seconds=timeout),
        message=f"deferred: waiting on a {cmd.kind[:100]} trigger",
    )
    return Result(True, value=ti.state)


def apply_lease_triggers(
    state: SchedulerState, cmd: c.LeaseTriggers, now: datetime, index: int
) -> Result:
    expires_at = now + timedelta(seconds=cmd.lease_ttl_seconds)
    grants = []
    for trigger in list(state.triggers.leasable(now)):
        if len(grants) >= cmd.max_triggers:
            break
        leased = state.triggers.lease(trigger, cmd.triggerer_id, index, expires_at)
        grants.append(grant_dict(leased))
    return Result(True, value=tuple(grants))


def _current(state: SchedulerState, ref: c.TriggerRef, triggerer_id: str, now: datetime) -> str:
    trigger = state.triggers.get(ref.key)
    if trigger is None:
        return UNKNOWN_TRIGGER
    if trigger.token != ref.token or trigger.expires_at is None or trigger.expires_at <= now:
        return r.STALE_TOKEN
    if trigger.triggerer_id != triggerer_id:
        return r.WRONG_WORKER
    return ""


def apply_heartbeat_triggers(
    state: SchedulerState, cmd: c.HeartbeatTriggers, now: datetime, index: int
) -> Result:
    items = []
    for ref in cmd.triggers:
        reason = _current(state, ref, cmd.triggerer_id, now)
        if reason:
            items.append(Item(False, reason))
            continue
        trigger = state.triggers.get(ref.key)
        assert trigger is not None and trigger.expires_at is not None
        expires_at = max(trigger.expires_at, now + timedelta(seconds=cmd.lease_ttl_seconds))
        if expires_at != trigger.expires_at:
            state.triggers.renew(trigger, expires_at)
        items.append(Item(True, "", expires_at))
    return Result.of_items(items)


def apply_fire_triggers(
    state: SchedulerState, cmd: c.FireTriggers, now: datetime, index: int
) -> Result:
    items = []
    for firing in cmd.firings:
        reason = _current(state, firing.ref, cmd.triggerer_id, now)
        watcher = state.triggers.get(firing.ref.key)
        if not reason and watcher is not None and aw.is_watcher(watcher):  # an asset's
            event_id, runs = aw.fire(state, watcher, firing.event_json, firing.error, now)
            items.append(Item(True, "", {"event_id": event_id, "runs": runs}))
            continue
        found = find(state, firing.ref.key)
        if not reason and (found is None or found[1].state is not TaskState.DEFERRED):
            reason = UNKNOWN_TRIGGER  # unreachable: a trigger leaves with its task's DEFERRED
        if reason:
            items.append(Item(False, reason))
            continue
        assert found is not None
        rec, ti = found
        trigger = state.triggers.drop(ti.key)
        assert trigger is not None
        touch_ti(state, ti)
        if trigger.method_name == dagrun_trigger.WAIT_METHOD and _triggers(rec, ti):
            _end_wait(state, rec, ti, trigger, firing.error, now)
            items.append(Item(True, "", ti.state))
            continue
        if firing.error:
            if not state.outbox.is_full():
                text = f"--- the {trigger.kind} trigger raised ---\n{firing.error}\n"
                _append_logs(state, ti, [c.LogChunk("stderr", text)], now)
            last = firing.error.strip().splitlines()[-1:] or ["an error"]
            _fail(state, rec, ti, f"trigger failed: {last[0]}", now)
            items.append(Item(True, "", ti.state))
            continue
        # the deferred attempt's row says how it ended; the next attempt resumes
        emit_entry(
            state,
            OutboxKind.TASK_INSTANCE,
            sn.ti_row(ti, TaskState.DEFERRED, message=f"{ti.message}; it fired"),
        )
        ti.resume_json = (  # texts checked as JSON by the checks: no parse at apply
            f'{{"event":{firing.event_json},"kwargs":{trigger.kwargs_json},'
            f'"method":{json.dumps(trigger.method_name)}}}'
        )
        ti.message = ""
        queue(state, rec, ti, now)
        items.append(Item(True, "", ti.state))
    return Result.of_items(items)


def _end_wait(
    state: SchedulerState, rec: Any, ti: Any, trigger: Trigger, error: str, now: datetime
) -> None:
    """A TriggerDagRunOperator's wait for its run ended (core/dagrun_trigger.py): the run
    reached an allowed state, and the task is SUCCESS here, in the core, with the run's ids
    as its return value (no worker attempt); or a failed state (the trigger raised), and
    the attempt that deferred fails (retries apply). The caller touched ``ti``."""
    if error:
        if not state.outbox.is_full():
            text = f"--- waiting for the triggered run: the {trigger.kind} trigger raised ---\n"
            _append_logs(state, ti, [c.LogChunk("stderr", text + error + "\n")], now)
        last = (error.strip().splitlines()[-1:] or ["an error"])[0]
        _fail(state, rec, ti, dagrun_trigger.wait_ended(trigger.kwargs_json, last), now)
        return
    refusal = xcom.outcome_refusal(rec, ti, trigger.kwargs_json, None)
    if refusal:  # only a hostile deferral's kwargs could be past the run's bound
        _fail(state, rec, ti, refusal, now)
        return
    ti.max_tries = max(ti.try_number, ti.max_tries - 1)  # the try given back at the wait
    ti.end_date = now
    ti.message = dagrun_trigger.wait_ended(trigger.kwargs_json, "")
    xcom.keep(rec, ti, trigger.kwargs_json)
    finish_task(state, rec, ti, TaskState.SUCCESS, now)
    on_task_success(state, rec, ti, now)  # its outlets' events, as an outcome's apply


def apply_timeout_triggers(
    state: SchedulerState, cmd: c.TimeoutTriggers, now: datetime, index: int
) -> Result:
    items = []
    for key in cmd.keys:
        trigger = state.triggers.get(key)
        found = find(state, key)
        if trigger is None or found is None:
            items.append(Item(False, UNKNOWN_TRIGGER))
            continue
        if trigger.timeout_at is None or trigger.timeout_at > now:
            items.append(Item(False, r.NOT_DUE))
            continue
        rec, ti = found
        touch_ti(state, ti)
        seconds = (trigger.timeout_at - trigger.created_at).total_seconds()
        _fail(state, rec, ti, f"trigger timed out after {seconds:g} s", now)
        items.append(Item(True, "", ti.state))
    return Result.of_items(items)


def _fail(state: SchedulerState, rec: Any, ti: Any, message: str, now: datetime) -> None:
    """The deferred attempt failed (the caller touched ``ti``): the try the deferral gave
    back is taken again, then retries apply as for any failed attempt."""
    ti.message = lim.clean_text(message[: lim.MAX_MESSAGE_CHARS])
    ti.end_date = now
    ti.max_tries = max(ti.try_number, ti.max_tries - 1)
    fail_attempt(state, rec, ti, now)


def timed_out(state: SchedulerState, now: datetime, limit: int = 1_000) -> list[TaskKey]:
    """Deferred tasks whose trigger's timeout passed (the leader proposes TimeoutTriggers)."""
    return state.triggers.timed_out(now, limit)


# -- checks (core.validate registers them) ----------------------------------------------------


def check_json_text(field: str, text: object, max_bytes: int, *, obj: bool) -> None:
    """JSON text within ``max_bytes`` and MAX_TRIGGER_DEPTH (``obj``: an object)."""
    lim.check_text(field, text, max_bytes, empty=False)
    assert isinstance(text, str)
    if lim._bracket_depth(text) > MAX_TRIGGER_DEPTH:
        raise LimitExceeded(field, f"is nested deeper than {MAX_TRIGGER_DEPTH} levels")
    try:
        value = lim.loads_json(text)
    except (ValueError, RecursionError) as err:
        raise LimitExceeded(field, f"is not valid JSON ({str(err)[:200]})") from None
    lim.check_json_object(field, {"v": value}, max_bytes + 8, MAX_TRIGGER_DEPTH + 1)
    if obj and not isinstance(value, dict):
        raise LimitExceeded(field, "must be a JSON object")


def _key(field: str, key: object) -> None:
    if not isinstance(key, TaskKey):
        raise LimitExceeded(field, "must be a TaskKey")
    lim.check_id(f"{field}.dag_id", key.dag_id)
    lim.check_id(f"{field}.run_id", key.run_id)
    lim.check_id(f"{field}.task_id", key.task_id)


def _ref(field: str, ref: object) -> None:
    if not isinstance(ref, c.TriggerRef):
        raise LimitExceeded(field, "must be a TriggerRef")
    _key(f"{field}.key", ref.key)
    lim.check_int(f"{field}.token", ref.token, 0, lim.MAX_TOKEN)


def _ttl(value: object) -> None:
    lim.check_float(
        "lease_ttl_seconds", value, lim.MIN_LEASE_TTL_SECONDS, lim.MAX_LEASE_TTL_SECONDS
    )


def _defer_check(cmd: c.DeferTask) -> None:
    lim.check_id("worker_id", cmd.worker_id)
    _key("key", cmd.key)
    lim.check_int("token", cmd.token, 0, lim.MAX_TOKEN)
    kind = lim.check_text("kind", cmd.kind, MAX_TRIGGER_KIND_CHARS, empty=False)
    if not all(ch.isalnum() or ch in "_.:-" for ch in kind):
        raise LimitExceeded("kind", "may hold letters, digits and _ . : - only")
    check_json_text("args_json", cmd.args_json, MAX_TRIGGER_ARGS_BYTES, obj=True)
    method = lim.check_text("method_name", cmd.method_name, MAX_METHOD_CHARS, empty=False)
    if any(ch.isspace() for ch in method):  # a name in the DAG file, or a TaskFlow task's
        raise LimitExceeded("method_name", "must be a callable's name (no spaces)")
    check_json_text("kwargs_json", cmd.kwargs_json, MAX_TRIGGER_ARGS_BYTES, obj=True)
    if cmd.timeout_seconds is not None:
        lim.check_float(
            "timeout_seconds",
            cmd.timeout_seconds,
            MIN_TRIGGER_TIMEOUT_SECONDS,
            lim.MAX_DURATION_SECONDS,
        )
    if not isinstance(cmd.chunks, tuple):
        raise LimitExceeded("chunks", "must be a tuple")
    lim.check_count("chunks", len(cmd.chunks), lim.MAX_LOG_CHUNKS_PER_CALL)
    for i, chunk in enumerate(cmd.chunks):
        if not isinstance(chunk, c.LogChunk) or chunk.stream not in ("stdout", "stderr"):
            raise LimitExceeded(f"chunks[{i}]", "must be a stdout or stderr LogChunk")
        lim.check_text(f"chunks[{i}].text", chunk.text, lim.MAX_OUTPUT_TEXT_CHARS)


def _lease_check(cmd: c.LeaseTriggers) -> None:
    lim.check_id("triggerer_id", cmd.triggerer_id)
    lim.check_int("max_triggers", cmd.max_triggers, 1, lim.MAX_LEASES_PER_CALL)
    _ttl(cmd.lease_ttl_seconds)


def _heartbeat_check(cmd: c.HeartbeatTriggers) -> None:
    lim.check_id("triggerer_id", cmd.triggerer_id)
    _ttl(cmd.lease_ttl_seconds)
    if not isinstance(cmd.triggers, tuple):
        raise LimitExceeded("triggers", "must be a tuple")
    lim.check_count("triggers", len(cmd.triggers), lim.MAX_ITEMS_PER_COMMAND)
    for i, ref in enumerate(cmd.triggers):
        _ref(f"triggers[{i}]", ref)


def _fire_check(cmd: c.FireTriggers) -> None:
    lim.check_id("triggerer_id", cmd.triggerer_id)
    if not isinstance(cmd.firings, tuple):
        raise LimitExceeded("firings", "must be a tuple")
    lim.check_count("firings", len(cmd.firings), lim.MAX_LEASES_PER_CALL)
    for i, firing in enumerate(cmd.firings):
        if not isinstance(firing, c.TriggerFiring):
            raise LimitExceeded(f"firings[{i}]", "must be a TriggerFiring")
        _ref(f"firings[{i}].ref", firing.ref)
        check_json_text(
            f"firings[{i}].event_json", firing.event_json, xcom.MAX_XCOM_BYTES, obj=False
        )
        lim.check_text(f"firings[{i}].error", firing.error, MAX_TRIGGER_ERROR_CHARS)


def _timeout_check(cmd: c.TimeoutTriggers) -> None:
    if not isinstance(cmd.keys, tuple):
        raise LimitExceeded("keys", "must be a tuple")
    lim.check_count("keys", len(cmd.keys), lim.MAX_ITEMS_PER_COMMAND)
    for i, key in enumerate(cmd.keys):
        _key(f"keys[{i}]", key)


CHECKS: dict[type, Callable[[Any], None]] = {
    c.DeferTask: _defer_check,
    c.LeaseTriggers: _lease_check,
    c.HeartbeatTriggers: _heartbeat_check,
    c.FireTriggers: _fire_check,
    c.TimeoutTriggers: _timeout_check,
}

HANDLERS: dict[type, Callable[[Any, Any, datetime, int], Result]] = {
    c.DeferTask: apply_defer_task,
    c.LeaseTriggers: apply_lease_triggers,
    c.HeartbeatTriggers: apply_heartbeat_triggers,
    c.FireTriggers: apply_fire_triggers,
    c.TimeoutTriggers: apply_timeout_triggers,
}
