"""TriggerDagRunOperator's wait_for_completion and reset_dag_run in the state machine
(core/dagrun_trigger.py, core/dagrun_reset.py).

wait_for_completion: the apply that creates the run makes the task DEFERRED on an
``external`` trigger watching that run (no worker slot), the firing finishes it SUCCESS in
the core with the run's ids as its value, a failed state fails it; the run is made once and
the wait ends once, across repeats, replays and snapshots. reset_dag_run: an existing run is
cleared so it runs again (winning over skip_when_already_exists, as in Airflow); without it
the attempt fails with "DagRun already exists"."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_dagrun_trigger import request, sim_of, target_runs, trigger_task
from test_state_harness import T0, Sim, at, dag, run_id, task
from test_state_triggers import defer, fire, lease_triggers

from raftsched.core import commands as c
from raftsched.core import dagrun_reset, dagrun_trigger
from raftsched.core import trigger_table as tt
from raftsched.core.dagrun_trigger import request_of
from raftsched.core.model import TaskKey
from raftsched.core.state import SchedulerState


def waiting(sim: Sim, **kw: Any) -> dict[str, Any]:
    """Lease d's trigger task, complete it asking to wait; the created run's ids."""
    grant = sim.lease(now=at(1))[0]
    text = request(wait_for_completion=True, poke_interval=2, **kw)
    assert sim.complete(grant, now=at(2), result_json=text).ok
    return {"grant": grant}


def finish_target(sim: Sim, run: str, success: bool, now: float = 3) -> None:
    grants = sim.lease(n=10, now=at(now))
    (work,) = [g for g in grants if g.lease.key.dag_id == "t" and g.lease.key.run_id == run]
    assert sim.complete(work, success=success, now=at(now)).ok


# -- wait_for_completion ---------------------------------------------------------------------


def test_the_task_waits_deferred_without_a_slot_and_succeeds_once_the_run_does() -> None:
    sim = sim_of(trigger_task("go"), task("after", "go"))
    waiting(sim)
    (made,) = target_runs(sim)
    ti = sim.ti("go")
    assert ti.state == "deferred" and ti.lease is None
    assert sim.state.task_queue.running_count("d") == 0  # no worker slot held
    assert "waiting for run" in ti.message and made.run_id in ti.message
    (trigger,) = sim.state.triggers.triggers()
    assert (trigger.kind, trigger.method_name) == ("external", dagrun_trigger.WAIT_METHOD)
    assert json.loads(trigger.args_json) == {
        "dag_id": "t",
        "logical_date": made.logical_date.isoformat(),
        "task_ids": [],
        "allowed_states": ["success"],
        "failed_states": ["failed"],
        "skipped_states": [],
        "poke_interval": 2.0,
    }
    assert trigger.timeout_at is None
    finish_target(sim, made.run_id, success=True)
    assert sim.state.run("t", made.run_id).state == "success"
    (grant,) = lease_triggers(sim, now=at(4))
    event = '{"state": "success", "states": {}}'
    assert fire(sim, grant, now=at(5), event=event).value[0].ok
    ti = sim.ti("go")
    assert ti.state == "success" and ti.try_number == 1 and ti.max_tries == 1
    assert json.loads(ti.result_json) == {
        "logical_date": made.logical_date.isoformat(),
        "trigger_dag_id": "t",
        "trigger_run_id": made.run_id,
    }
    assert "reached an allowed state" in ti.message
    assert sim.states()["after"] == "queued"  # its downstream goes on, same apply
    again = fire(sim, grant, now=at(6), event=event)  # a repeat finds no trigger
    assert not again.value[0].ok
    assert len(target_runs(sim)) == 1 and sim.ti("go").state == "success"
    rows = [row for row in sim.outbox("task_instance") if row["task_id"] == "go"]
    assert [row["state"] for row in rows][-2:] == ["deferred", "success"]


def test_a_failed_state_fails_the_task_with_a_clear_message_and_retries_apply() -> None:
    sim = sim_of(trigger_task("go", retries=1, retry_delay_seconds=0.0))
    waiting(sim)
    (made,) = target_runs(sim)
    assert sim.ti("go").max_tries == 3  # the try given back while it waits
    finish_target(sim, made.run_id, success=False)
    (grant,) = lease_triggers(sim, now=at(4))
    error = (
        "Traceback (most recent call last):\n  ...\nraftsched.errors.TriggerError: t at"
        f" {made.logical_date.isoformat()} reached a failed state: failed\n"
    )
    assert fire(sim, grant, now=at(5), error=error).value[0].ok
    ti = sim.ti("go")
    assert ti.state == "up_for_retry" and ti.max_tries == 2  # its own retry, not more
    assert ti.message == (
        f"the triggered run {made.run_id} of DAG 't' ended failed (one of failed_states):"
        " see that run's failed tasks"
    )
    assert len(target_runs(sim)) == 1


def test_no_retry_left_fails_the_task_and_its_run() -> None:
    sim = sim_of(trigger_task("go"))
    waiting(sim, failed_states=["failed"], allowed_states=["success"])
    (made,) = target_runs(sim)
    finish_target(sim, made.run_id, success=False)
    (grant,) = lease_triggers(sim, now=at(4))
    error = "raftsched.errors.TriggerError: t at x reached a failed state: failed"
    assert fire(sim, grant, now=at(5), error=error).value[0].ok
    assert sim.ti("go").state == "failed" and sim.run().state == "failed"


def test_the_task_execution_timeout_bounds_the_wait() -> None:
    sim = sim_of(trigger_task("go", execution_timeout_seconds=30.0))
    waiting(sim)
    (trigger,) = sim.state.triggers.triggers()
    assert trigger.timeout_at == at(32)


def test_no_room_to_wait_triggers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = sim_of(trigger_task("go"))
    monkeypatch.setattr(tt, "MAX_TRIGGERS_PER_DAG", 0)
    waiting(sim)
    assert target_runs(sim) == []
    ti = sim.ti("go")
    assert ti.state == "failed" and "nothing was triggered" in ti.message


def test_a_wait_replays_and_restores_to_the_same_state() -> None:
    sim = sim_of(trigger_task("go"))
    waiting(sim)
    replica = SchedulerState()
    for command, index in sim.log:
        replica.apply(command, log_index=index)
    assert replica.digest() == sim.state.digest()
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()
    (made,) = target_runs(sim)
    finish_target(sim, made.run_id, success=True)
    (grant,) = lease_triggers(sim, now=at(4))
    assert fire(sim, grant, now=at(5)).value[0].ok
    replica = SchedulerState()
    for command, index in sim.log:
        replica.apply(command, log_index=index)
    assert replica.digest() == sim.state.digest()
    assert len(list(replica.runs("t"))) == 1


def test_a_wait_method_named_by_another_task_resumes_it_as_any_deferral() -> None:
    # only a TriggerDagRunOperator's wait is finished by the core
    sim = Sim()
    assert sim.register(dag("d", task("a"))).ok
    sim.create("d")
    (grant,) = sim.lease()
    kw = {"kind": "external", "args_json": "{}", "kwargs_json": '{"x": 1}'}
    assert defer(sim, grant, method_name=dagrun_trigger.WAIT_METHOD, **kw).ok
    (trigger_grant,) = lease_triggers(sim)
    assert fire(sim, trigger_grant).value[0].ok
    assert sim.states() == {"a": "queued"}


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"allowed_states": "success"}, "allowed_states must be a list"),
        ({"allowed_states": ["done"]}, "is not a run state"),
        ({"failed_states": [1]}, "is not a run state"),
        ({"failed_states": ["failed"] * 5}, "at most 4"),
        ({"poke_interval": 0.5}, "poke_interval must be 1..86400"),
        ({"poke_interval": float("nan")}, "poke_interval must be"),
        ({"poke_interval": True}, "number of seconds"),
        ({"poke_interval": "60"}, "number of seconds"),
    ],
)
def test_a_bad_wait_is_a_reason(extra: dict[str, Any], why: str) -> None:
    got = request_of(json.dumps({"trigger_dag_id": "t", "wait_for_completion": True, **extra}))
    assert isinstance(got, str) and why in got, got


def test_the_wait_defaults_are_airflows() -> None:
    got = request_of(json.dumps({"trigger_dag_id": "t", "wait_for_completion": True}))
    assert isinstance(got, dict)
    assert got["wait"] == {"allowed": ["success"], "failed": ["failed"], "poke": 60.0}
    got = request_of(
        json.dumps(
            {
                "trigger_dag_id": "t",
                "wait_for_completion": True,
                "allowed_states": [],
                "failed_states": [],
            }
        )
    )
    assert isinstance(got, dict)
    assert got["wait"] == {"allowed": ["success"], "failed": [], "poke": 60.0}
    no_wait = request_of(json.dumps({"trigger_dag_id": "t", "wait_for_completion": "yes"}))
    assert isinstance(no_wait, dict) and no_wait["wait"] is None and no_wait["reset"] is False


@settings(max_examples=80, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=10,
    )
)
def test_any_wait_or_reset_value_is_a_request_or_a_reason(value: Any) -> None:
    for key in ("allowed_states", "failed_states", "poke_interval", "reset_dag_run"):
        got = request_of(
            json.dumps({"trigger_dag_id": "t", "wait_for_completion": True, key: value})
        )
        assert isinstance(got, dict | str)


@settings(max_examples=40, deadline=None)
@given(
    states=st.lists(st.sampled_from(["success", "failed", "running", "queued", "x"]), max_size=5),
    poke=st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-5, 100_000)),
    fire_error=st.booleans(),
)
def test_any_wait_request_applies_without_halting(
    states: list[str], poke: Any, fire_error: bool
) -> None:
    sim = sim_of(trigger_task("go"))
    grant = sim.lease(now=at(1))[0]
    text = json.dumps(
        {
            "trigger_dag_id": "t",
            "wait_for_completion": True,
            "allowed_states": states,
            "failed_states": states[::-1],
            "poke_interval": poke,
        },
        allow_nan=True,
    )
    done = sim.complete(grant, now=at(2), result_json=text)
    if not done.ok:  # NaN/Infinity: refused by the command's checks, nothing applied
        assert done.reason == "invalid" and sim.ti("go").state == "running"
        return
    assert not sim.state.halted
    if sim.ti("go").state == "deferred":
        (trigger_grant,) = lease_triggers(sim, now=at(3))
        assert fire(sim, trigger_grant, now=at(4), error="boom" if fire_error else "").ok
    assert not sim.state.halted
    assert sim.ti("go").state in ("success", "failed")


# -- reset_dag_run ---------------------------------------------------------------------------


def with_existing_target(**conf: Any) -> Sim:
    """d's trigger task leased; t's run "nightly" at T0 already ran to SUCCESS."""
    sim = Sim()
    assert sim.register(dag("d", trigger_task("go")), dag("t", task("work"))).ok
    decision = c.RunDecision("t", T0, T0, T0, run_type="manual", conf=conf, run_id="nightly")
    assert sim.apply(c.CreateRuns(request_id=sim.rid(), now=T0, runs=(decision,))).ok
    finish_target(sim, "nightly", success=True, now=1)
    assert sim.create("d").ok
    assert sim.state.run("t", "nightly").state == "success"
    return sim


def go_grant(sim: Sim) -> Any:
    (grant,) = [g for g in sim.lease(n=10, now=at(2)) if g.lease.key.dag_id == "d"]
    return grant


def test_reset_clears_the_existing_run_so_it_runs_again() -> None:
    sim = with_existing_target(old=True)
    text = request(trigger_run_id="nightly", reset_dag_run=True)
    assert sim.complete(go_grant(sim), now=at(3), result_json=text).ok
    (run,) = target_runs(sim)
    assert run.run_id == "nightly" and run.state == "running" and run.end_date is None
    assert run.conf == {"old": True}  # as Airflow's clear: the run keeps its conf
    assert sim.states("t", "nightly") == {"work": "queued"}
    work = sim.ti("work", "t", "nightly")
    assert work.max_tries == 2  # its next attempt is try 2
    ti = sim.ti("go")
    assert ti.state == "success"
    assert json.loads(ti.result_json)["trigger_run_id"] == "nightly"
    details = [row.detail for row in sim.state.audit if row.action == "trigger"]
    assert details in ([], ["TriggerDagRunOperator reset_dag_run: cleared"])


def test_reset_wins_over_skip_when_already_exists_as_in_airflow() -> None:
    sim = with_existing_target()
    text = request(trigger_run_id="nightly", reset_dag_run=True, skip_when_already_exists=True)
    assert sim.complete(go_grant(sim), now=at(3), result_json=text).ok
    assert sim.ti("go").state == "success" and sim.states("t", "nightly") == {"work": "queued"}


def test_without_reset_an_existing_run_fails_the_task_saying_so() -> None:
    sim = with_existing_target()
    text = request(logical_date=T0.isoformat())
    assert sim.complete(go_grant(sim), now=at(3), result_json=text).ok
    ti = sim.ti("go")
    assert ti.state == "failed" and ti.message.startswith("DagRun already exists")
    assert "reset_dag_run=True" in ti.message
    assert sim.state.run("t", "nightly").state == "success"  # untouched


def test_reset_by_logical_date_and_then_wait_for_it() -> None:
    sim = with_existing_target()
    text = request(logical_date=T0.isoformat(), reset_dag_run=True, wait_for_completion=True)
    assert sim.complete(go_grant(sim), now=at(3), result_json=text).ok
    assert sim.ti("go").state == "deferred"
    (trigger,) = sim.state.triggers.triggers()
    assert json.loads(trigger.args_json)["logical_date"] == T0.isoformat()
    finish_target(sim, "nightly", success=True, now=4)
    (grant,) = lease_triggers(sim, now=at(5))
    assert fire(sim, grant, now=at(6)).value[0].ok
    assert sim.ti("go").state == "success"
    assert [r.run_id for r in target_runs(sim)] == ["nightly"]


def test_a_task_cannot_reset_its_own_run() -> None:
    sim = Sim()
    assert sim.register(dag("d", trigger_task("go"), task("other"))).ok
    assert sim.create("d").ok
    (grant,) = [g for g in sim.lease(n=10) if g.lease.key.task_id == "go"]
    text = json.dumps({"trigger_dag_id": "d", "trigger_run_id": run_id(), "reset_dag_run": True})
    assert sim.complete(grant, now=at(3), result_json=text).ok
    ti = sim.ti("go")
    assert ti.state == "failed" and "would clear the run this task runs in" in ti.message


def test_the_pure_decisions() -> None:
    sim = with_existing_target()
    runs = sim.state.run_table
    by = TaskKey("d", run_id(), "go")
    assert dagrun_reset.existing_run(runs, "t", "nightly", None) is runs.get("t", "nightly")
    assert dagrun_reset.existing_run(runs, "t", "", T0) is runs.get("t", "nightly")
    assert dagrun_reset.existing_run(runs, "t", "other", at(9)) is None
    assert dagrun_reset.existing_run(runs, "t", "", None) is None
    assert dagrun_reset.refusal(None, "t", by).startswith("DagRun already exists")
    rec = runs.get("t", "nightly")
    assert dagrun_reset.refusal(rec, "t", by) == ""
    assert dagrun_reset.refusal(rec, "t", replace(by, dag_id="t", run_id="nightly"))
    assert dagrun_reset.tasks_to_clear(rec) == ["work"]


def test_a_reset_replays_to_the_same_state() -> None:
    sim = with_existing_target()
    text = request(trigger_run_id="nightly", reset_dag_run=True)
    assert sim.complete(go_grant(sim), now=at(3), result_json=text).ok
    replica = SchedulerState()
    for command, index in sim.log:
        replica.apply(command, log_index=index)
    assert replica.digest() == sim.state.digest()


def test_a_worker_cannot_defer_on_the_cores_reserved_method_names() -> None:
    import grpc

    from raftsched.api.servicers.worker_triggers import _method
    from raftsched.errors import StatusError

    assert _method("") == "execute_complete" and _method("resume") == "resume"
    with pytest.raises(StatusError) as refused:
        _method(dagrun_trigger.WAIT_METHOD)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "reserved" in refused.value.message


def test_a_run_that_cannot_be_reset_is_skipped_when_the_task_says_so() -> None:
    sim = Sim()
    assert sim.register(dag("d", trigger_task("go"), task("other"))).ok
    assert sim.create("d").ok
    (grant,) = [g for g in sim.lease(n=10) if g.lease.key.task_id == "go"]
    text = json.dumps(
        {
            "trigger_dag_id": "d",
            "trigger_run_id": run_id(),
            "reset_dag_run": True,
            "skip_when_already_exists": True,
        }
    )
    assert sim.complete(grant, now=at(3), result_json=text).ok
    ti = sim.ti("go")
    assert ti.state == "skipped" and "would clear the run this task runs in" in ti.message


@pytest.mark.parametrize("kwargs_json", ['{"x": 1}', "[1, 2]", '"text"', '{"trigger_run_id": []}'])
def test_a_hostile_deferral_naming_the_wait_method_never_breaks_apply(kwargs_json: str) -> None:
    # the door refuses it (test above); the core still tolerates what a worker could send
    sim = sim_of(trigger_task("go"))
    grant = sim.lease(now=at(1))[0]
    kw = {"kind": "external", "args_json": "{}", "kwargs_json": kwargs_json}
    done = defer(sim, grant, now=at(2), method_name=dagrun_trigger.WAIT_METHOD, **kw)
    if not done.ok:  # not a JSON object: refused by the command's checks
        return
    (trigger_grant,) = lease_triggers(sim, now=at(3))
    assert fire(sim, trigger_grant, now=at(4)).ok
    assert not sim.state.halted and target_runs(sim) == []
    assert sim.ti("go").state == "success" and "reached an allowed state" in sim.ti("go").message
