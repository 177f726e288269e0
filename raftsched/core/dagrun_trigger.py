"""A task that triggers a run of another DAG (Airflow's ``TriggerDagRunOperator``), decided
exactly once (docs/architecture.md §20).

The task (``TaskSpec.trigger_dagrun``, an added field: the upgrade gate refuses it below
cluster version 3) runs on a worker like a Python task, so its templated arguments render
there; its return value is the request::

    {"trigger_dag_id": "target", "trigger_run_id": "" | "id", "logical_date": "" | ISO,
     "conf": {...}, "fail_when_dag_is_paused": false, "skip_when_already_exists": false}

The apply of the attempt's successful outcome (``CompleteAttempt``) creates the run, in that
same apply, with the checks of a manual trigger (``handlers_runs.create_run``); if the run
cannot be created (unknown or removed DAG, run id or logical date taken, a malformed
request), the attempt fails instead, with the reason, and retries apply (with
``skip_when_already_exists``, a taken run id or date ends the task SKIPPED instead). So the
run exists iff the task succeeded: an outcome is fenced by its lease and remembered by its
request id, a successful task is not attempted again, and a failover replays the same entry
to the same decision; no retry or replay makes a second run. The default logical date is
the command's time (``now``: the same on every replica; the next free microsecond when a run
holds it), the default run id ``manual__<logical date>``.
An audit record ("trigger", its actor the task) says who made the run.
The task's return value (XCom) becomes ``{"trigger_dag_id", "trigger_run_id",
"logical_date"}`` of the run created.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from raftsched.core import audit, limits
from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core.model import RunType, TaskKey, utc_iso

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

_WHY = {
    r.UNKNOWN_DAG: "no DAG {dag!r} is registered (is its file in the DAG folder? see"
    " `raftsched dags list` and `raftsched dags list-import-errors`)",
    r.INACTIVE_DAG: "DAG {dag!r} is no longer in the DAG folder",
    r.RUN_EXISTS: "DAG {dag!r} already has a run with that run id or logical date; give"
    " another trigger_run_id/logical_date (or none: a new one each time)",
}


def request_of(result_json: str) -> dict[str, Any] | str:
    """The checked request of a trigger task's return value, or why it is not one."""
    try:
        value = json.loads(result_json) if result_json else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return "the trigger task returned no request (a JSON object with trigger_dag_id)"
    try:
        dag_id = limits.check_id("trigger_dag_id", value.get("trigger_dag_id"))
        run_id = value.get("trigger_run_id") or ""
        if run_id:
            limits.check_id("trigger_run_id", run_id)
        conf = value.get("conf") or {}
        if not isinstance(conf, dict):
            return f"conf must be a JSON object, got {type(conf).__name__}"
        limits.check_json_object("conf", conf, limits.MAX_CONF_BYTES, limits.MAX_CONF_DEPTH)
        logical = _date(value.get("logical_date"))
    except Exception as err:  # LimitExceeded, ValueError, TypeError: the attempt fails with it
        return str(err)[:500]
    paused = value.get("fail_when_dag_is_paused") is True
    skip = value.get("skip_when_already_exists") is True
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "logical": logical,
        "conf": conf,
        "paused": paused,
        "skip": skip,
    }


def _date(value: object) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or len(value) > 64:
        raise ValueError(f"logical_date must be an ISO 8601 text, got {str(value)[:80]!r}")
    parsed = datetime.fromisoformat(value)
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def _free_moment(state: SchedulerState, dag_id: str, now: datetime, run_id: str) -> datetime:
    """The default logical date: ``now``, or the first microsecond after it no run of the DAG
    holds (outcomes applied together share one time: the instances of a mapped trigger)."""
    moment = now
    for _ in range(_MAX_NUDGES):
        default_id = "" if run_id else f"{RunType.MANUAL.value}__{utc_iso(moment)}"
        if not state.run_table.slot_taken(dag_id, moment, default_id):  # (the date, alone)
            break
        moment += timedelta(microseconds=1)
    return moment


_MAX_NUDGES = 1_000
SKIP = "~"  # trigger()'s answer: the run exists and the task asked to be skipped then


def trigger(state: SchedulerState, result_json: str, now: datetime, index: int, by: TaskKey) -> str:
    """Create the run the successful attempt of a trigger task asks for: its new return
    value (JSON text), or ``"!"`` + why not (nothing changed; the attempt fails with it), or
    ``"~"`` + why, when the run exists and the task says ``skip_when_already_exists``."""
    from raftsched.core.handlers_runs import create_run  # (it imports transitions, as we do)

    req = request_of(result_json)
    if isinstance(req, str):
        return "!" + req
    dag_id = req["dag_id"]
    record = state.catalog.get(dag_id)
    if record is not None and req["paused"] and record.paused:
        return f"!DAG {dag_id!r} is paused (fail_when_dag_is_paused=True)"
    logical = req["logical"] or _free_moment(state, dag_id, now, req["run_id"])
    decision = c.RunDecision(
        dag_id,
        logical,
        logical,
        logical,
        run_type=RunType.MANUAL,
        conf=req["conf"],
        run_id=req["run_id"],
    )
    item = create_run(state, decision, now)
    if not item.ok and item.reason == r.RUN_EXISTS and req["skip"]:
        return SKIP + _WHY[r.RUN_EXISTS].format(dag=dag_id)  # skip_when_already_exists
    if not item.ok:
        why = _WHY.get(item.reason, "{reason}: {detail}")
        return "!" + why.format(dag=dag_id, reason=item.reason, detail=item.value or "")
    audit.record_task_trigger(state, by, dag_id, str(item.value), now, index)  # who: the task
    created = {
        "trigger_dag_id": dag_id,
        "trigger_run_id": item.value,
        "logical_date": logical.isoformat(),
    }
    return json.dumps(created, sort_keys=True, separators=(",", ":"))
