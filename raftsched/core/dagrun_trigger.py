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

Optional keys of the request (absent: as before):

- ``"reset_dag_run": true``: a run that already exists (the run id or logical date taken)
  is cleared so it runs again (core/dagrun_reset.py), in the same apply, instead of failing
  the attempt; as in Airflow it wins over ``skip_when_already_exists``.
- ``"wait_for_completion": true`` with ``allowed_states`` (default ``["success"]``),
  ``failed_states`` (default ``["failed"]``; ``[]``: none) and ``poke_interval`` (seconds,
  1..86,400, default 60): the same apply that creates (or resets) the run makes the task
  DEFERRED on an ``external`` trigger watching that run (:func:`defer`), so the wait holds no
  worker slot; the triggerer's firing finishes the task SUCCESS in the core with the value
  above, its raising (a failed state reached) fails the attempt (``handlers_triggers``). The
  run is created once and the wait resumes once: both are committed decisions, the firing is
  consumed with the trigger. A retry of a failed wait triggers again, as in Airflow.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from raftsched.core import audit, dagrun_reset, limits, mapping, transitions
from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core.handlers_marks import clear
from raftsched.core.model import RunState, RunType, TaskInstance, TaskKey, utc_iso

if TYPE_CHECKING:
    from raftsched.core.run_table import LiveRun
    from raftsched.core.state import SchedulerState

WAIT_METHOD = "raftsched:trigger_dagrun_wait"  # a wait's trigger: finished by the core
WAIT_KIND = "external"  # the triggerer's ExternalRunState trigger (ExternalTaskSensor's)
RUN_STATES = tuple(s.value for s in RunState)  # what allowed/failed_states may name
MIN_POKE_SECONDS = 1.0
MAX_POKE_SECONDS = 86_400.0
DEFAULT_POKE_SECONDS = 60.0  # Airflow's poke_interval

_WHY = {
    r.UNKNOWN_DAG: "no DAG {dag!r} is registered (is its file in the DAG folder? see"
    " `raftsched dags list` and `raftsched dags list-import-errors`)",
    r.INACTIVE_DAG: "DAG {dag!r} is no longer in the DAG folder",
    r.RUN_EXISTS: "DagRun already exists: DAG {dag!r} already has a run with that run id or"
    " logical date; give another trigger_run_id/logical_date (or none: a new one each time),"
    " or set reset_dag_run=True to run it again, or skip_when_already_exists=True",
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
        wait = _wait(value) if value.get("wait_for_completion") is True else None
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
        "reset": value.get("reset_dag_run") is True,
        "wait": wait,
    }


def _wait(value: dict[str, Any]) -> dict[str, Any]:
    """The checked wait of a request (``wait_for_completion``); raises ValueError."""
    allowed = _states("allowed_states", value.get("allowed_states"), ("success",))
    failed = _states("failed_states", value.get("failed_states"), ("failed",))
    return {
        "allowed": allowed or ["success"],  # Airflow: none given means success
        "failed": failed,
        "poke": _poke(value.get("poke_interval")),
    }


def _states(field: str, given: object, default: tuple[str, ...]) -> list[str]:
    if given is None:
        return list(default)
    if not isinstance(given, list) or len(given) > len(RUN_STATES):
        raise ValueError(f"{field} must be a list of at most {len(RUN_STATES)} run states")
    out = set()
    for item in given:
        if not isinstance(item, str) or item.lower() not in RUN_STATES:
            shown = str(item)[:40] if isinstance(item, str) else type(item).__name__
            raise ValueError(f"{field}: {shown!r} is not a run state (one of {RUN_STATES})")
        out.add(item.lower())
    return sorted(out)


def _poke(given: object) -> float:
    if given is None:
        return DEFAULT_POKE_SECONDS
    if isinstance(given, bool) or not isinstance(given, int | float):
        raise ValueError(f"poke_interval must be a number of seconds, got {type(given).__name__}")
    seconds = float(given)
    if not MIN_POKE_SECONDS <= seconds <= MAX_POKE_SECONDS:  # (NaN too)
        raise ValueError(
            f"poke_interval must be {MIN_POKE_SECONDS:g}..{MAX_POKE_SECONDS:g} seconds,"
            f" got {str(given)[:40]}"
        )
    return seconds


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


def trigger(
    state: SchedulerState, result_json: str, now: datetime, index: int, by: TaskKey
) -> tuple[str, str]:
    """Create (or with ``reset_dag_run``, clear) the run the successful attempt of a trigger
    task asks for. Returns (text, wait): text is its new return value (JSON text), or
    ``"!"`` + why not (nothing changed; the attempt fails with it), or ``"~"`` + why, when
    the run exists and the task says ``skip_when_already_exists``; wait is "" or, with
    ``wait_for_completion``, the arguments (JSON text) of the trigger :func:`defer` waits on."""
    from raftsched.core.handlers_runs import create_run  # (it imports transitions, as we do)

    req = request_of(result_json)
    if isinstance(req, str):
        return "!" + req, ""
    dag_id = req["dag_id"]
    record = state.catalog.get(dag_id)
    if record is not None and req["paused"] and record.paused:
        return f"!DAG {dag_id!r} is paused (fail_when_dag_is_paused=True)", ""
    if req["wait"] is not None and not state.triggers.room_for(by.dag_id):
        why = "could not wait for the run: too many deferred tasks (at most 10,000 per DAG,"
        return "!" + why + " 100,000 in all); nothing was triggered", ""
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
    if not item.ok and item.reason == r.RUN_EXISTS and req["reset"]:  # reset_dag_run
        rec = dagrun_reset.existing_run(state.run_table, dag_id, req["run_id"], req["logical"])
        why = dagrun_reset.refusal(rec, dag_id, by)
        if why and req["skip"]:  # cannot be reset here: skip_when_already_exists then
            return SKIP + why, ""
        if why:
            return "!" + why, ""
        assert rec is not None
        clear(state, rec, dagrun_reset.tasks_to_clear(rec), False, now)
        run_id, logical = rec.run.run_id, rec.run.logical_date
        audit.record_task_trigger(state, by, dag_id, run_id, now, index, reset=True)
    elif not item.ok and item.reason == r.RUN_EXISTS and req["skip"]:
        return SKIP + _WHY[r.RUN_EXISTS].format(dag=dag_id), ""  # skip_when_already_exists
    elif not item.ok:
        why = _WHY.get(item.reason, "{reason}: {detail}")
        return "!" + why.format(dag=dag_id, reason=item.reason, detail=item.value or ""), ""
    else:
        run_id = str(item.value)
        audit.record_task_trigger(state, by, dag_id, run_id, now, index)  # who: the task
    created = {
        "trigger_dag_id": dag_id,
        "trigger_run_id": run_id,
        "logical_date": logical.isoformat(),
    }
    text = json.dumps(created, sort_keys=True, separators=(",", ":"))
    wait = req["wait"]
    if wait is None:
        return text, ""
    args = {
        "dag_id": dag_id,
        "logical_date": logical.isoformat(),
        "task_ids": [],
        "allowed_states": wait["allowed"],
        "failed_states": wait["failed"],
        "skipped_states": [],
        "poke_interval": wait["poke"],
    }
    return text, json.dumps(args, sort_keys=True, separators=(",", ":"))


def defer(
    state: SchedulerState, rec: LiveRun, ti: TaskInstance, created: str, args: str, now: datetime
) -> None:
    """The attempt of ``ti`` that created (or reset) a run waits for it: DEFERRED on an
    ``external`` trigger with ``args`` (from :func:`trigger`), its kwargs the return value
    ``created``; no worker slot is held. The caller touched ``ti`` and checked the room. As
    a deferral, the try is given back until the wait ends (``handlers_triggers``). The
    trigger's timeout is the task's ``execution_timeout`` when it has one."""
    task = rec.topo.tasks[mapping.task_of(ti.key.task_id)]
    seconds = task.execution_timeout_seconds
    wanted = json.loads(args)  # our own text, just written
    message = clean(
        f"waiting for run {json.loads(created)['trigger_run_id']} of DAG"
        f" {wanted['dag_id']!r} to reach {' or '.join(wanted['allowed_states'])}"
        " (deferred: no worker slot held)"
    )
    deferral = None if not seconds else now + timedelta(seconds=max(1.0, seconds))
    transitions.defer(
        state,
        rec,
        ti,
        now,
        kind=WAIT_KIND,
        args_json=args,
        method_name=WAIT_METHOD,
        kwargs_json=created,
        timeout_at=deferral,
        message=message,
    )


def wait_ended(kwargs_json: str, error: str) -> str:
    """The message of a wait that ended: an allowed state reached (``error`` ""), or not
    (``error``: the last line of what the triggerer raised). ``kwargs_json`` is the
    trigger's kwargs (checked JSON; a hostile DeferTask may have named this method: read
    with care)."""
    try:
        created = json.loads(kwargs_json)
    except ValueError:
        created = None
    if not isinstance(created, dict):
        created = {}
    run_id = str(created.get("trigger_run_id", "?"))[: limits.MAX_ID_CHARS]
    dag_id = str(created.get("trigger_dag_id", "?"))[: limits.MAX_ID_CHARS]
    if not error:
        return clean(f"run {run_id} of DAG {dag_id!r} reached an allowed state")
    if FAILED_STATE_REACHED in error:  # the external trigger's own words
        state = error.rsplit(": ", 1)[-1][:100]
        return clean(
            f"the triggered run {run_id} of DAG {dag_id!r} ended {state} (one of"
            " failed_states): see that run's failed tasks"
        )
    return clean(f"waiting for run {run_id} of DAG {dag_id!r} failed: {error[:500]}")


FAILED_STATE_REACHED = "reached a failed state"  # triggerer/cluster_triggers.external_trigger


def clean(text: str) -> str:
    return limits.clean_text(text[: limits.MAX_MESSAGE_CHARS])
