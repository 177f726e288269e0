"""Scenarios: DAG registration, pause, import errors, run creation."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from test_state_harness import T0, Sim, at, dag, run_id, task

from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core.model import ImportErrorRecord, RunState, RunType, TaskState


def test_register_then_unchanged_then_update() -> None:
    sim = Sim()
    spec = dag("d", task("a"))
    first = sim.register(spec)
    assert first.ok and first.value[0] == (True, "", "d")
    assert sim.state.dags["d"].spec.spec_hash == spec.compute_hash()  # filled in by apply
    assert sim.register(spec).value[0].reason == r.UNCHANGED
    sim.register(dag("d", task("a"), task("b", "a")), now=at(5))
    record = sim.state.dag("d")
    assert record is not None and [t.task_id for t in record.spec.tasks] == ["a", "b"]
    assert record.updated_at == at(5)
    rows = sim.outbox("dag")
    assert len(rows) == 2 and rows[-1]["spec"]["tasks"][1]["task_id"] == "b"
    assert rows[0] | {"spec": None} == {
        "dag_id": "d",
        "fileloc": "/dags/d.py",
        "spec": None,
        "spec_hash": spec.compute_hash(),
        "paused": False,
        "active": True,
        "updated_at": T0.isoformat(),
    }


def test_paused_at_creation_applies_to_new_dags_only() -> None:
    sim = Sim()
    sim.register(dag("old", task("a")))
    sim.register(dag("old", task("a"), task("b")), dag("new", task("a")), paused_at_creation=True)
    assert sim.state.dags["old"].paused is False
    assert sim.state.dags["new"].paused is True


def test_invalid_specs_are_refused() -> None:
    sim = Sim()
    naive = dag("n", task("a"), start_date=T0.replace(tzinfo=None))
    result = sim.register(naive, dag("", task("a")))
    assert [i.reason for i in result.value] == [r.INVALID, r.INVALID]
    assert not sim.state.dags


def test_remove_deactivates_and_register_reactivates() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    result = sim.apply(c.RemoveDags(request_id="rm", now=T0, dag_ids=("d", "ghost")))
    assert [i.reason for i in result.value] == ["", r.UNKNOWN_DAG]
    assert sim.state.dags["d"].active is False
    assert sim.create("d").value[0].reason == r.INACTIVE_DAG
    sim.register(dag("d", task("a")))
    assert sim.state.dags["d"].active is True
    assert sim.create("d").ok


def test_pause_unpause() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    pause = c.SetPaused(request_id="p1", now=T0, dag_id="d", paused=True)
    assert sim.apply(pause).ok and sim.state.dags["d"].paused
    again = c.SetPaused(request_id="p2", now=T0, dag_id="d", paused=True)
    assert sim.apply(again).reason == r.UNCHANGED
    ghost = c.SetPaused(request_id="p3", now=T0, dag_id="x", paused=True)
    assert sim.apply(ghost) == r.Result(False, r.UNKNOWN_DAG)
    assert [row["paused"] for row in sim.outbox("dag")] == [False, True]


def test_import_errors_replace_the_set() -> None:
    sim = Sim()
    errors = (ImportErrorRecord("/dags/bad.py", "SyntaxError", "tb"),)
    assert sim.apply(c.SetImportErrors(request_id="e1", now=T0, errors=errors)).ok
    same = sim.apply(c.SetImportErrors(request_id="e2", now=T0, errors=errors))
    assert same.reason == r.UNCHANGED
    sim.apply(c.SetImportErrors(request_id="e3", now=at(1), errors=()))
    assert sim.state.import_errors == ()
    assert sim.outbox("import_errors") == [
        {
            "errors": [{"fileloc": "/dags/bad.py", "message": "SyntaxError", "traceback": "tb"}],
            "updated_at": T0.isoformat(),
        },
        {"errors": [], "updated_at": at(1).isoformat()},
    ]


# -- runs ------------------------------------------------------------------------------------


def test_create_run_queues_roots_only() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b"), task("c", "a", "b")))
    result = sim.create("d")
    assert result.ok and result.value[0].value == run_id()
    run = sim.run()
    assert run.state is RunState.QUEUED and run.created_at == T0
    assert run.data_interval_start == T0 - timedelta(days=1)
    assert sim.states() == {"a": "queued", "b": "queued", "c": "none"}
    assert sim.state.last_logical_date("d") == T0
    assert sim.state.active_run_count("d") == 1


CREATE_TABLE = [
    # name, setup, decision overrides, expected reason
    ("duplicate slot", "run_at_T0", {}, r.RUN_EXISTS),
    ("slot before last", "run_at_T0", {"logical": T0 - timedelta(days=1)}, r.RUN_EXISTS),
    ("manual same date", "run_at_T0", {"run_type": RunType.MANUAL}, r.RUN_EXISTS),
    ("paused", "paused", {}, r.PAUSED),
    ("manual while paused", "paused", {"run_type": RunType.MANUAL}, ""),
    ("max active runs", "max1", {"logical": T0 + timedelta(days=1)}, r.MAX_ACTIVE_RUNS),
    ("manual past max", "max1", {"logical": T0 + timedelta(days=1), "run_type": "manual"}, ""),
    ("unknown dag", "none", {"dag_id": "ghost"}, r.UNKNOWN_DAG),
    ("naive date", "none", {"logical": T0.replace(tzinfo=None)}, r.INVALID),
]


def test_create_runs_table() -> None:
    for name, setup, overrides, expected in CREATE_TABLE:
        sim = Sim()
        sim.register(dag("d", task("a"), max_active_runs=1))
        if setup in ("run_at_T0", "max1"):
            assert sim.create("d").ok
        elif setup == "paused":
            sim.apply(c.SetPaused(request_id="p", now=T0, dag_id="d", paused=True))
        logical = overrides.get("logical", T0)
        decision = c.RunDecision(
            overrides.get("dag_id", "d"),
            logical,
            logical,
            logical,
            run_type=RunType(overrides.get("run_type", RunType.SCHEDULED)),
        )
        result = sim.apply(c.CreateRuns(request_id="x", now=T0, runs=(decision,)))
        # a value past a bound refuses the whole command (its message in value), not an item
        reason = result.reason if isinstance(result.value, str) else result.value[0].reason
        assert reason == expected, name
        assert result.ok == (expected == ""), name


def test_refused_slot_taken_by_manual_run_advances_the_schedule() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    assert sim.create("d", T0, run_type=RunType.MANUAL).ok
    assert sim.state.last_logical_date("d") is None  # manual runs do not move it
    assert sim.create("d", T0).value[0].reason == r.RUN_EXISTS
    assert sim.state.last_logical_date("d") == T0  # else the leader would propose it forever


def test_batch_of_runs_stops_at_max_active_runs() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), max_active_runs=3))
    decisions = tuple(
        c.RunDecision("d", T0 + timedelta(days=i), T0, T0 + timedelta(days=i)) for i in range(5)
    )
    result = sim.apply(c.CreateRuns(request_id="b", now=T0, runs=decisions))
    assert [i.reason for i in result.value] == ["", "", "", r.MAX_ACTIVE_RUNS, r.MAX_ACTIVE_RUNS]
    assert result.ok is False and result.reason == r.MAX_ACTIVE_RUNS
    assert sim.state.active_run_count("d") == 3


def test_manual_run_with_conf_and_explicit_run_id() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    decision = c.RunDecision("d", T0, T0, T0, RunType.MANUAL, {"x": [1, 2]}, run_id="mine")
    assert (
        sim.apply(c.CreateRuns(request_id="m", now=T0, runs=(decision,))).value[0].value == "mine"
    )
    assert sim.run(run="mine").conf == {"x": [1, 2]}
    other_date = replace(decision, logical_date=T0 + timedelta(hours=1))
    again = sim.apply(c.CreateRuns(request_id="m2", now=T0, runs=(other_date,)))
    assert again.value[0].reason == r.RUN_EXISTS  # same run_id


def test_manual_run_of_paused_dag_waits_for_unpause() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")), paused_at_creation=True)
    assert sim.create("d", run_type=RunType.MANUAL).ok
    assert sim.lease() == []
    sim.apply(c.SetPaused(request_id="u", now=T0, dag_id="d", paused=False))
    [grant] = sim.lease()
    assert grant.lease.key.run_id == run_id(run_type="manual")


def test_dag_without_tasks_succeeds_at_once() -> None:
    sim = Sim()
    sim.register(dag("d"))
    sim.create("d")
    assert sim.run().state is RunState.SUCCESS
    assert sim.state.active_run_count("d") == 0


def test_run_keeps_the_dag_version_it_started_with() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    sim.create("d")
    sim.register(dag("d", task("a"), task("b", "a")))
    spec = sim.state.run_spec("d", run_id())
    assert spec is not None and [t.task_id for t in spec.tasks] == ["a"]
    sim.run_task("a")
    assert sim.run().state is RunState.SUCCESS
    sim.create("d", T0 + timedelta(days=1))
    assert sim.states(run=run_id(T0 + timedelta(days=1))) == {"a": "queued", "b": "none"}


def test_run_state_follows_its_tasks() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b", "a")))
    sim.create("d")
    assert sim.run().state is RunState.QUEUED
    [grant] = sim.lease(now=at(1))
    assert sim.run().state is RunState.RUNNING and sim.run().start_date == at(1)
    sim.complete(grant, now=at(2))
    assert sim.run().state is RunState.RUNNING
    sim.run_task("b", now=at(3))
    assert sim.run().state is RunState.SUCCESS and sim.run().end_date == at(3)
    assert sim.ti("b").state is TaskState.SUCCESS
