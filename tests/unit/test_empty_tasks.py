"""Empty tasks (kind "empty": EmptyTask, Airflow's EmptyOperator/DummyOperator) are finished by
the apply that makes them ready: never queued, never leased, no worker (docs/architecture.md
§19). Their trigger rules, skips and branches behave as any task's."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

from test_state_harness import Sim, at, dag, run_id, task

from raftsched.core import commands as c
from raftsched.core import versions as vs
from raftsched.core.model import TaskSpec
from raftsched.core.state import SchedulerState
from raftsched.dags.dag import DAG

BASE = vs.BASELINE_RELEASE


def empty(task_id: str, *upstream: str, **kw: object) -> TaskSpec:
    return dataclasses.replace(task(task_id, *upstream, **kw), kind="empty", command=None)


def sim_of(*tasks: TaskSpec) -> Sim:
    sim = Sim()
    assert sim.register(dag("d", *tasks)).ok
    assert sim.create("d").ok
    return sim


def agree(sim: Sim) -> None:
    assert sim.state.digest() == sim.state.recompute_digest()
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()


def test_an_empty_task_finishes_in_the_apply_that_makes_it_ready_and_is_never_leased() -> None:
    sim = sim_of(empty("start"), task("work", "start"), empty("end", "work"))
    assert sim.states() == {"start": "success", "work": "queued", "end": "none"}
    start = sim.ti("start")
    assert start.try_number == 1 and start.lease is None and start.start_date == start.end_date
    grants = sim.lease(n=10, now=at(1))
    assert [g.lease.key.task_id for g in grants] == ["work"]
    assert sim.complete(grants[0], now=at(2)).ok
    # the join finished with work's outcome, and so did the run: same apply
    assert sim.states()["end"] == "success"
    assert str(sim.run().state) == "success"
    rows = {(r["task_id"], r["state"]) for r in sim.outbox("task_instance")}
    assert ("start", "success") in rows and ("end", "success") in rows
    agree(sim)


def test_a_thousand_empty_branches_cost_no_lease_and_a_chain_settles_without_recursion() -> None:
    branches = [empty(f"b{i:04d}") for i in range(1_000)]
    sim = sim_of(*branches, task("join", *(b.task_id for b in branches)))
    assert sim.states()["join"] == "queued"
    assert sum(s == "success" for s in sim.states().values()) == 1_000
    assert [g.lease.key.task_id for g in sim.lease(n=1_000)] == ["join"]

    chain = [empty("e0000")] + [empty(f"e{i:04d}", f"e{i - 1:04d}") for i in range(1, 1_500)]
    sim = sim_of(*chain)  # deeper than Python's recursion limit
    assert set(sim.states().values()) == {"success"}
    assert str(sim.run().state) == "success"
    agree(sim)


def test_trigger_rules_and_upstream_failures_rule_an_empty_task_as_any_task() -> None:
    sim = sim_of(
        task("a"),
        empty("strict", "a"),
        empty("done", "a", trigger_rule="all_done"),
        empty("on_fail", "a", trigger_rule="one_failed"),
        task("after", "strict"),
    )
    grant = sim.lease(now=at(1))[0]
    assert sim.complete(grant, success=False, now=at(2)).ok
    assert sim.states() == {
        "a": "failed",
        "strict": "upstream_failed",
        "done": "success",
        "on_fail": "success",
        "after": "upstream_failed",
    }
    assert str(sim.run().state) == "failed"
    agree(sim)


def test_a_branch_skips_an_empty_task_it_does_not_follow_and_the_skip_goes_on() -> None:
    sim = sim_of(
        task("pick"),
        empty("left", "pick"),
        empty("right", "pick"),
        task("after_right", "right"),
        empty("join", "left", "after_right", trigger_rule="none_failed_min_one_success"),
    )
    grant = sim.lease(now=at(1))[0]
    assert sim.complete(grant, now=at(2), follow=("left",)).ok
    states = sim.states()
    assert states["left"] == "success" and states["right"] == "skipped"
    assert states["after_right"] == "skipped" and states["join"] == "success"
    assert str(sim.run().state) == "success"


def test_a_cleared_empty_task_finishes_again_at_once() -> None:
    sim = sim_of(task("a"), empty("end", "a"))
    sim.run_task("a", now=at(1))
    assert sim.states()["end"] == "success"
    cleared = sim.apply(
        c.ClearTasks(
            request_id=sim.rid(), now=at(5), dag_id="d", run_id=run_id(), task_ids=("end",)
        )
    )
    assert cleared.ok
    assert sim.states()["end"] == "success" and sim.ti("end").try_number == 2
    assert sim.ti("end").end_date == at(5)
    agree(sim)


def test_the_upgrade_gate_refuses_an_empty_task_until_the_cluster_runs_release_3() -> None:
    spec = dag("d", empty("e"))
    register = c.RegisterDags(request_id="r", now=datetime(2024, 1, 1), specs=(spec,))
    why = vs.refusal(register, BASE)
    assert why is not None and "kind" in why and "finish the upgrade" in why
    assert vs.refusal(register, vs.RELEASE) is None


def test_empty_task_empty_operator_and_dummy_operator_compile_to_the_empty_kind() -> None:
    from raftsched import EmptyTask
    from raftsched.airflow.operators.dummy import DummyOperator
    from raftsched.airflow.operators.empty import EmptyOperator

    with DAG("d", schedule=None, start_date=datetime(2024, 1, 1)) as d:
        start = EmptyTask("start")
        mid = EmptyOperator(task_id="mid", trigger_rule="all_done", priority_weight=3)
        end = DummyOperator(task_id="end")
        start >> mid >> end
    spec = d.to_spec()
    kinds = {t.task_id: (t.kind, t.command) for t in spec.tasks}
    assert kinds == {"start": ("empty", None), "mid": ("empty", None), "end": ("empty", None)}
    assert spec.task("mid").trigger_rule == "all_done" and spec.task("mid").priority_weight == 3
