"""TriggerDagRunOperator in the state machine (core/dagrun_trigger.py): the successful
outcome's apply creates the run, once; a replayed or stale outcome, a retry or a failover
replay never makes a second; an unknown target fails the attempt with the reason."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_state_harness import T0, Sim, at, dag, run_id, task

from raftsched.core import commands as c
from raftsched.core import versions
from raftsched.core.dagrun_trigger import request_of
from raftsched.core.model import TaskSpec
from raftsched.core.state import SchedulerState


def trigger_task(task_id: str = "go", *upstream: str, **kw: Any) -> TaskSpec:
    spec = replace(task(task_id, *upstream, **kw), kind="python", command=None)
    return replace(spec, callable_name=f"@taskflow:d:{task_id}", trigger_dagrun=True)


def request(dag_id: str = "t", **kw: Any) -> str:
    return json.dumps({"trigger_dag_id": dag_id, "conf": {"from": "d"}, **kw})


def sim_of(*tasks: TaskSpec) -> Sim:
    sim = Sim()
    assert sim.register(dag("d", *tasks), dag("t", task("work"))).ok
    assert sim.create("d").ok
    return sim


def target_runs(sim: Sim) -> list[Any]:
    return list(sim.state.runs("t"))


def test_the_successful_outcome_creates_the_run_in_the_same_apply() -> None:
    sim = sim_of(trigger_task())
    grant = sim.lease(now=at(1))[0]
    assert target_runs(sim) == []
    assert sim.complete(grant, now=at(2), result_json=request()).ok
    runs = target_runs(sim)
    assert len(runs) == 1
    run = runs[0]
    assert (run.run_type, run.conf, run.logical_date) == ("manual", {"from": "d"}, at(2))
    assert run.run_id == f"manual__{at(2).isoformat()}"
    assert sim.states("t", run.run_id)["work"] == "queued"  # its root queued, same apply
    assert sim.states()["go"] == "success"
    xcom = json.loads(sim.ti("go").result_json)
    assert xcom == {
        "logical_date": at(2).isoformat(),
        "trigger_dag_id": "t",
        "trigger_run_id": run.run_id,
    }


def test_run_id_and_logical_date_given() -> None:
    sim = sim_of(trigger_task())
    grant = sim.lease(now=at(1))[0]
    text = request(trigger_run_id="nightly", logical_date="2024-05-01T00:00:00")
    assert sim.complete(grant, now=at(2), result_json=text).ok
    (run,) = target_runs(sim)
    assert run.run_id == "nightly" and run.logical_date.isoformat() == "2024-05-01T00:00:00+00:00"


def test_a_replayed_outcome_makes_no_second_run() -> None:
    sim = sim_of(trigger_task())
    grant = sim.lease(now=at(1))[0]
    cmd = c.CompleteAttempt(
        request_id="once",
        now=at(2),
        key=grant.lease.key,
        token=grant.lease.token,
        success=True,
        result_json=request(),
    )
    first = sim.apply(cmd)
    again = sim.apply(cmd)  # pysyncobj reported a timeout: the worker sends it again
    stale = sim.apply(replace(cmd, request_id="other", now=at(3)))  # same lease, new id
    assert first.ok and again.ok and again.duplicate and not stale.ok
    assert len(target_runs(sim)) == 1


def test_an_unknown_target_fails_the_attempt_and_a_retry_triggers_once() -> None:
    sim = sim_of(trigger_task(retries=1, retry_delay_seconds=0.0))
    grant = sim.lease(now=at(1))[0]
    assert sim.complete(grant, now=at(2), result_json=request("nope")).ok
    ti = sim.ti("go")
    assert ti.state == "up_for_retry"
    assert "no DAG 'nope' is registered" in ti.message
    assert list(sim.state.runs("nope")) == []
    item = c.QueueDecision(ti.key, ti.state, ti.try_number)
    assert sim.apply(c.QueueTasks(request_id=sim.rid(), now=at(3), items=(item,))).ok
    grant = sim.lease(now=at(4))[0]
    assert sim.complete(grant, now=at(5), result_json=request()).ok
    assert sim.ti("go").state == "success" and len(target_runs(sim)) == 1


def test_a_taken_run_id_fails_the_attempt_with_the_reason() -> None:
    sim = sim_of(trigger_task())
    assert sim.create("t", T0).ok
    grant = sim.lease(now=at(1))[0] if False else None
    grants = {g.lease.key.dag_id: g for g in sim.lease(n=10, now=at(1))}
    grant = grants["d"]
    text = request(logical_date=T0.isoformat())
    assert sim.complete(grant, now=at(2), result_json=text).ok
    assert sim.ti("go").state == "failed"
    assert "already has a run" in sim.ti("go").message
    assert len(target_runs(sim)) == 1


def test_a_failed_attempt_triggers_nothing() -> None:
    sim = sim_of(trigger_task())
    grant = sim.lease(now=at(1))[0]
    assert sim.complete(grant, success=False, now=at(2), result_json=request()).ok
    assert target_runs(sim) == []


def test_a_trigger_task_is_refused_by_the_gate_before_version_3() -> None:
    cmd = c.RegisterDags(request_id="r", now=T0, specs=(dag("d", trigger_task()),))
    assert versions.refusal(cmd, 2) is not None
    assert versions.refusal(cmd, 3) is None


def test_replaying_the_log_on_a_fresh_replica_makes_the_same_single_run() -> None:
    sim = sim_of(trigger_task())
    grant = sim.lease(now=at(1))[0]
    assert sim.complete(grant, now=at(2), result_json=request()).ok
    replica = SchedulerState()
    for command, index in sim.log:
        replica.apply(command, log_index=index)
    assert replica.digest() == sim.state.digest()
    assert len(list(replica.runs("t"))) == 1
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()


@settings(max_examples=60, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=8,
    )
)
def test_any_return_value_is_a_request_or_a_reason_never_an_error(value: Any) -> None:
    for candidate in (
        value,
        {"trigger_dag_id": value},
        {"trigger_dag_id": "t", "conf": value},
        {"trigger_dag_id": "t", "logical_date": value},
    ):
        got = request_of(json.dumps(candidate))
        assert isinstance(got, dict | str)


def test_the_run_table_after_a_trigger_is_the_one_a_manual_trigger_makes() -> None:
    sim = sim_of(trigger_task())
    grant = sim.lease(now=at(1))[0]
    assert sim.complete(grant, now=at(2), result_json=request()).ok
    assert sim.state.run("t", f"manual__{at(2).isoformat()}") is not None
    assert sim.run(run=run_id()).state in ("success", "running")


def test_skip_when_already_exists_ends_the_task_skipped_instead() -> None:
    sim = sim_of(trigger_task())
    assert sim.create("t", T0).ok
    grants = {g.lease.key.dag_id: g for g in sim.lease(n=10, now=at(1))}
    text = request(logical_date=T0.isoformat(), skip_when_already_exists=True)
    assert sim.complete(grants["d"], now=at(2), result_json=text).ok
    ti = sim.ti("go")
    assert ti.state == "skipped" and "already has a run" in ti.message
    assert len(target_runs(sim)) == 1


def test_the_audit_log_names_the_task_that_triggered_the_run() -> None:
    sim = sim_of(trigger_task())
    assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=at(0), version=3)).ok
    grant = sim.lease(now=at(1))[0]
    assert sim.complete(grant, now=at(2), result_json=request()).ok
    (made,) = target_runs(sim)
    rows = [row for row in sim.state.audit if row.action == "trigger"]
    assert [(row.dag_id, row.run_id, row.actor) for row in rows] == [
        ("t", made.run_id, f"task go of d/{run_id()}")
    ]


def test_two_triggers_applied_at_one_time_make_two_runs() -> None:
    # outcomes applied together share the command time: the second takes the next microsecond
    sim = sim_of(trigger_task("go"), trigger_task("go2"))
    grants = sim.lease(n=2, now=at(1))
    for grant in grants:
        assert sim.complete(grant, now=at(2), result_json=request()).ok
    dates = sorted(run.logical_date for run in target_runs(sim))
    assert len(dates) == 2 and dates[1] - dates[0] == timedelta(microseconds=1)
    assert {sim.ti(t).state for t in ("go", "go2")} == {"success"}
