"""depends_on_past, wait_for_downstream and ignore_first_depends_on_past in the state machine
(core/past_deps.py, docs/architecture.md §20): decided in apply from committed state, the
first run exempt, the next run settled in the apply that finishes the previous one, and the
previous run kept in memory while the run after it may ask for it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_state_harness import T0, Sim, at, dag, run_id, task

from raftsched.core import commands as c
from raftsched.core import past_deps
from raftsched.core.model import RunType, TaskSpec, TaskState
from raftsched.core.state import SchedulerState
from raftsched.core.validate_specs import check_spec
from raftsched.errors import LimitExceeded

DAY = timedelta(days=1)
R1, R2, R3 = run_id(T0), run_id(T0 + DAY), run_id(T0 + 2 * DAY)


def past(task_id: str, *upstream: str, how: str = "past", **kw: Any) -> TaskSpec:
    return replace(task(task_id, *upstream, **kw), past_deps=how)


def sim_of(*tasks: TaskSpec, runs: int = 2) -> Sim:
    sim = Sim()
    assert sim.register(dag("d", *tasks)).ok
    for i in range(runs):
        assert sim.create("d", T0 + i * DAY).ok
    return sim


def finish(sim: Sim, run: str, task_id: str, success: bool = True, now: Any = None) -> None:
    """Lease until ``run``'s ``task_id`` comes up, complete it; release the others."""
    grants = sim.lease(n=100, now=now or at(1))
    wanted = [g for g in grants if (g.lease.key.run_id, g.lease.key.task_id) == (run, task_id)]
    others = [g for g in grants if g not in wanted]
    if others:
        refs = tuple(c.LeaseRef(g.lease.key, g.lease.token) for g in others)
        sim.apply(
            c.ReleaseLeases(request_id=sim.rid(), now=now or at(1), worker_id="w1", leases=refs)
        )
    assert wanted, f"{run}.{task_id} not leased"
    assert sim.complete(wanted[0], success, now=now or at(1)).ok


def mark(sim: Sim, run: str, state: TaskState, *task_ids: str) -> None:
    cmd = c.MarkTasks(
        request_id=sim.rid(), now=at(5), dag_id="d", run_id=run, task_ids=task_ids, state=state
    )
    assert sim.apply(cmd).ok


def check_replicas_agree(sim: Sim) -> None:
    assert sim.state.digest() == sim.state.recompute_digest()
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()


def test_the_first_run_is_exempt_and_the_second_waits_for_the_first() -> None:
    sim = sim_of(past("a"), task("b", "a"))
    assert sim.states(run=R1)["a"] == "queued"
    assert sim.states(run=R2)["a"] == "none"  # its trigger rule is met, the past is not
    assert sim.ti("a", run=R2).message == (
        f"waiting for the previous run: 'a' of run {R1} must succeed or be skipped"
        " (depends_on_past)"
    )
    finish(sim, R1, "a")
    assert sim.ti("a", run=R2).message == ""
    # the apply that committed run 1's outcome queued run 2's instance
    assert sim.states(run=R2)["a"] == "queued"
    check_replicas_agree(sim)


def test_without_the_option_runs_do_not_wait_for_each_other() -> None:
    sim = sim_of(task("a"))
    assert sim.states(run=R2)["a"] == "queued"


def test_a_failed_previous_instance_holds_the_task_until_it_is_marked() -> None:
    sim = sim_of(past("a"))
    finish(sim, R1, "a", success=False)
    assert sim.states(run=R1)["a"] == "failed"
    assert sim.states(run=R2)["a"] == "none"
    assert sim.run(run=R2).state not in ("success", "failed")  # it waits, as in Airflow
    mark(sim, R1, TaskState.SUCCESS, "a")
    assert sim.states(run=R2)["a"] == "queued"
    check_replicas_agree(sim)


def test_a_skipped_previous_instance_counts_as_done_an_upstream_failed_one_does_not() -> None:
    sim = sim_of(task("gate"), past("a", "gate"))
    finish(sim, R1, "gate", success=False)
    assert sim.states(run=R1)["a"] == "upstream_failed"
    finish(sim, R2, "gate")
    assert sim.states(run=R2)["a"] == "none"  # upstream_failed is not done
    table = sim.state.run_table
    sim.ti("a", run=R1).state = TaskState.SKIPPED  # the state a branch or a skip code gives
    assert past_deps.met(table, table.get("d", R2), "a")


def test_wait_for_downstream_waits_for_the_previous_runs_direct_downstream() -> None:
    sim = sim_of(past("a", how="downstream"), task("b", "a"), task("c", "b"))
    finish(sim, R1, "a")
    assert sim.states(run=R2)["a"] == "none"  # run 1's b is not done
    finish(sim, R1, "b")
    # b is a's direct downstream; c (further down) is not waited for
    assert sim.states(run=R1)["c"] == "queued"
    assert sim.states(run=R2)["a"] == "queued"
    check_replicas_agree(sim)


def test_ignore_first_depends_on_past_decides_for_a_task_the_previous_run_lacked() -> None:
    for how, expected in (("past", "queued"), ("past_strict", "none")):
        sim = Sim()
        assert sim.register(dag("d", task("x"))).ok
        assert sim.create("d", T0).ok
        assert sim.register(dag("d", task("x"), past("a", how=how)), now=at(1)).ok
        assert sim.create("d", T0 + DAY, now=at(2)).ok
        assert sim.states(run=R2)["a"] == expected, how


def test_the_previous_run_is_by_logical_date_not_by_creation() -> None:
    # a manual run on an earlier date: its previous run is the held one before its date
    # (none here); the later run was decided before it existed and stays as it was
    sim = Sim()
    assert sim.register(dag("d", past("a"))).ok
    assert sim.create("d", T0 + 2 * DAY).ok
    assert sim.states(run=R3)["a"] == "queued"  # no earlier run held: first
    assert sim.create("d", T0 + DAY, run_type=RunType.MANUAL).ok
    backfill = run_id(T0 + DAY, "manual")
    assert sim.states(run=backfill)["a"] == "queued"
    finish(sim, R3, "a")
    assert sim.states(run=R3)["a"] == "success"


def ack_all(sim: Sim, now: Any) -> None:
    seq = sim.state.outbox.last_seq
    cmd = c.AckMaterialized(
        request_id=sim.rid(), now=now, seq=seq, finished_run_retention_seconds=0
    )
    assert sim.apply(cmd).ok


def test_the_previous_run_stays_in_memory_while_the_run_after_it_may_ask() -> None:
    sim = sim_of(past("a"), runs=1)
    finish(sim, R1, "a")
    assert sim.run(run=R1).state == "success"
    ack_all(sim, at(100))
    assert sim.state.run("d", R1) is not None  # the newest: the next run will ask for it
    assert sim.create("d", T0 + DAY, now=at(101)).ok
    ack_all(sim, at(102))
    assert sim.state.run("d", R1) is not None  # run 2 is unfinished
    finish(sim, R2, "a", now=at(103))
    ack_all(sim, at(104))
    assert sim.state.run("d", R1) is None  # run 2 decided: run 1 may go
    assert sim.state.run("d", R2) is not None  # now the newest
    check_replicas_agree(sim)


def test_runs_without_past_deps_leave_memory_as_before() -> None:
    sim = sim_of(task("a"), runs=1)
    finish(sim, R1, "a")
    ack_all(sim, at(100))
    assert sim.state.run("d", R1) is None


def test_a_previous_run_gone_from_memory_passes() -> None:
    # documented: the core cannot read the DB; a run on an older date than every held run
    # (its predecessor evicted long ago) is not held back
    sim = sim_of(past("a"), runs=1)
    finish(sim, R1, "a", success=False)
    for rec in list(sim.state.run_table.records("d")):
        sim.state.run_table.evict(rec, at(50))  # as after retention, whatever its state
    assert sim.create("d", T0 + DAY, now=at(60)).ok
    assert sim.states(run=R2)["a"] == "queued"


def test_core_refuses_an_unknown_past_deps_value() -> None:
    spec = dag("d", past("a", how="sometimes"))
    try:
        check_spec(spec)
    except LimitExceeded as err:
        assert "past_deps" in str(err)
    else:
        raise AssertionError("accepted")


def test_a_spec_with_past_deps_is_refused_by_the_gate_before_version_3() -> None:
    from raftsched.core import versions

    spec = dag("d", past("a"))
    cmd = c.RegisterDags(request_id="r", now=T0, specs=(spec,))
    assert versions.refusal(cmd, 2) is not None
    assert versions.refusal(cmd, 3) is None


def test_rule_of_airflow_arguments() -> None:
    assert past_deps.rule(False, False, False) == ""
    assert past_deps.rule(True, False, False) == "past_strict"
    assert past_deps.rule(True, False, True) == "past"
    assert past_deps.rule(False, True, True) == "downstream"  # implies depends_on_past
    assert past_deps.rule(False, True, False) == "downstream_strict"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outcomes=st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=25),
    how=st.sampled_from(["past", "downstream"]),
)
def test_no_instance_starts_before_its_previous_one_is_done(
    outcomes: list[tuple[int, bool]], how: str
) -> None:
    """Whatever order attempts end in, and whatever their outcome, run k's ``a`` is queued
    only while run k-1's ``a`` (and, for wait_for_downstream, its ``b``) is success/skipped."""
    runs = [run_id(T0 + i * DAY) for i in range(4)]
    sim = sim_of(past("a", how=how), task("b", "a"), runs=4)
    for step, (which, ok) in enumerate(outcomes, start=1):
        grants = sim.lease(n=100, now=at(step))
        mine = [g for g in grants if g.lease.key.run_id == runs[which]]
        for g in grants:
            if g in mine[:1]:
                sim.complete(g, ok, now=at(step))
            else:
                ref = (c.LeaseRef(g.lease.key, g.lease.token),)
                sim.apply(
                    c.ReleaseLeases(request_id=sim.rid(), now=at(step), worker_id="w1", leases=ref)
                )
        for k in range(1, 4):
            now_a = sim.states(run=runs[k])["a"]
            if now_a in ("queued", "running", "success", "failed", "up_for_retry"):
                before = sim.states(run=runs[k - 1])
                assert before["a"] in ("success", "skipped"), (k, before, now_a)
                if how == "downstream":
                    assert before["b"] in ("success", "skipped"), (k, before, now_a)
    check_replicas_agree(sim)


def test_a_queue_decision_for_a_task_held_by_the_past_is_refused() -> None:
    sim = sim_of(past("a"))
    ti = sim.ti("a", run=R2)
    decision = c.QueueDecision(ti.key, ti.state, ti.try_number)
    result = sim.apply(c.QueueTasks(request_id=sim.rid(), now=at(1), items=(decision,)))
    assert not result.value[0].ok
    assert sim.states(run=R2)["a"] == "none"
