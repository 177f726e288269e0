"""Dynamic task mapping in the state machine (core/mapping.py): expansion in the apply that
makes a mapped task ready, its bounds, zero items, retries per instance, the ordered list
downstream, clearing one instance, and what an instance's lease runs."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_state_harness import Sim, at, dag, run_id, task

from raftsched.core import commands as c
from raftsched.core import limits, mapping, versions, xcom
from raftsched.core.model import TaskKey, TaskSpec, TaskState
from raftsched.core.state import SchedulerState

REF = mapping.XCOM_REF


def mapped(task_id: str, *upstream: str, over: Any, **kw: Any) -> TaskSpec:
    """A bash task mapped over ``over`` (a list, or an upstream id: its return value)."""
    source = over if isinstance(over, list) else {REF: over}
    expand = json.dumps({"args": [["command", source]]}, sort_keys=True)
    return replace(task(task_id, *upstream, **kw), expand_json=expand)


def sim_of(*tasks: TaskSpec) -> Sim:
    sim = Sim()
    assert sim.register(dag("d", *tasks)).ok
    assert sim.create("d").ok
    return sim


def lease_all(sim: Sim, now: Any = None) -> list[Any]:
    return sim.lease(n=1_000, now=now or at(1))


def check_replicas_agree(sim: Sim) -> None:
    assert sim.state.digest() == sim.state.recompute_digest()
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()


# -- expansion -------------------------------------------------------------------------------


def test_a_literal_list_expands_at_run_creation() -> None:
    sim = sim_of(mapped("m", over=["echo a", "echo b", "echo c"]), task("after", "m"))
    states = sim.states()
    assert states == {
        "m": "none",
        "m[0]": "queued",
        "m[1]": "queued",
        "m[2]": "queued",
        "after": "none",
    }
    assert sim.ti("m").map_count == 3
    check_replicas_agree(sim)


def test_an_upstream_return_value_expands_the_task_when_its_outcome_commits() -> None:
    sim = sim_of(task("make"), mapped("m", "make", over="make"), task("after", "m"))
    grant = sim.lease(now=at(1))[0]
    assert "m[0]" not in sim.states()
    assert sim.complete(grant, now=at(2), result_json='["x","y"]').ok
    # the same apply: the instances are queued, each its own task instance
    assert sim.states()["m[0]"] == "queued" and sim.states()["m[1]"] == "queued"
    assert sim.ti("m").map_count == 2
    rows = {row["task_id"] for row in sim.outbox("task_instance")}
    assert {"m[0]", "m[1]"} <= rows
    check_replicas_agree(sim)


def test_downstream_waits_for_every_instance_and_gets_their_values_in_order() -> None:
    sim = sim_of(mapped("m", over=["a", "b", "c"]), task("after", "m"))
    grants = {g.lease.key.task_id: g for g in lease_all(sim)}
    assert set(grants) == {"m[0]", "m[1]", "m[2]"}
    for index in (2, 0):  # out of order
        assert sim.complete(grants[f"m[{index}]"], now=at(2), result_json=str(index * 10)).ok
    assert sim.states()["after"] == "none" and sim.states()["m"] == "none"
    assert sim.complete(grants["m[1]"], now=at(3)).ok  # returns nothing: null in the list
    assert sim.states()["m"] == "success" and sim.states()["after"] == "queued"
    key = TaskKey("d", run_id(), "after")
    assert xcom.upstream_results(sim.state, key) == {"m": "[0,null,20]"}
    # the mapped task's DB rows: one try, its outcome standing in for an attempt
    rows = [
        (r["try_number"], r["state"]) for r in sim.outbox("task_instance") if r["task_id"] == "m"
    ]
    assert rows[-1] == (1, "success") and max(t for t, _ in rows) == 1
    sim.run_task("after", now=at(4))
    assert str(sim.run().state) == "success"
    check_replicas_agree(sim)


def test_zero_items_skip_the_task_and_its_all_success_downstream() -> None:
    sim = sim_of(task("make"), mapped("m", "make", over="make"), task("after", "m"))
    assert sim.complete(sim.lease(now=at(1))[0], now=at(2), result_json="[]").ok
    assert sim.states() == {"make": "success", "m": "skipped", "after": "skipped"}
    assert sim.ti("m").message == "mapped over 0 items"
    assert str(sim.run().state) == "success"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('{"a":1}', "an object, not a list"),
        ('"text"', "str, not a list"),
    ],
)
def test_a_value_that_is_not_a_list_fails_the_task_saying_why(value: str, problem: str) -> None:
    sim = sim_of(task("make"), mapped("m", "make", over="make"), task("after", "m"))
    assert sim.complete(sim.lease(now=at(1))[0], now=at(2), result_json=value).ok
    assert sim.states() == {"make": "success", "m": "failed", "after": "upstream_failed"}
    assert problem in sim.ti("m").message
    assert str(sim.run().state) == "failed"


def test_no_value_at_all_fails_the_task() -> None:
    sim = sim_of(task("make"), mapped("m", "make", over="make"))
    assert sim.complete(sim.lease(now=at(1))[0], now=at(2)).ok
    assert sim.states()["m"] == "failed"
    assert "returned nothing" in sim.ti("m").message


def test_past_max_map_length_the_task_fails_with_a_clear_reason() -> None:
    sim = sim_of(task("make"), mapped("m", "make", over="make", max_map_length=5))
    assert sim.complete(sim.lease(now=at(1))[0], now=at(2), result_json="[1,2,3,4,5,6]").ok
    ti = sim.ti("m")
    assert ti.state is TaskState.FAILED and ti.map_count is None
    assert "6 instances" in ti.message and "max_map_length of 5" in ti.message
    assert not any("[" in t for t in sim.states())


def test_the_default_bound_is_1024() -> None:
    sim = sim_of(task("make"), mapped("m", "make", over="make"))
    value = json.dumps(list(range(limits.DEFAULT_MAX_MAP_LENGTH + 1)))
    assert sim.complete(sim.lease(now=at(1))[0], now=at(2), result_json=value).ok
    assert "max_map_length of 1024" in sim.ti("m").message


def test_a_cross_product_expands_into_every_combination() -> None:
    expand = json.dumps({"args": [["x", [1, 2]], ["y", ["a", "b", "c"]]]})
    spec = replace(task("m"), kind="python", command=None, callable_name="f", expand_json=expand)
    sim = sim_of(spec)
    assert sim.ti("m").map_count == 6
    items = [
        json.loads(mapping.instance_task(spec, i, {}).kwargs_json) for i in range(6)
    ]  # the last name varies fastest, as Airflow
    assert items[:4] == [
        {"x": 1, "y": "a"},
        {"x": 1, "y": "b"},
        {"x": 1, "y": "c"},
        {"x": 2, "y": "a"},
    ]


# -- instances: retries, leases, clear --------------------------------------------------------


def test_each_instance_retries_on_its_own() -> None:
    sim = sim_of(mapped("m", over=["a", "b"], retries=1, retry_delay_seconds=0.0))
    grants = {g.lease.key.task_id: g for g in lease_all(sim)}
    assert sim.complete(grants["m[1]"], success=False, now=at(2)).ok
    assert sim.complete(grants["m[0]"], now=at(2)).ok
    assert sim.ti("m[1]").state is TaskState.UP_FOR_RETRY and sim.ti("m").state is TaskState.NONE
    sim.apply(
        c.QueueTasks(
            request_id=sim.rid(),
            now=at(3),
            items=(c.QueueDecision(TaskKey("d", run_id(), "m[1]"), TaskState.UP_FOR_RETRY, 1),),
        )
    )
    retry = lease_all(sim, at(4))
    assert [g.lease.key.task_id for g in retry] == ["m[1]"] and retry[0].lease.try_number == 2
    assert sim.complete(retry[0], success=False, now=at(5)).ok
    assert sim.ti("m[1]").state is TaskState.FAILED
    assert sim.ti("m").state is TaskState.FAILED and sim.ti("m[0]").try_number == 1
    check_replicas_agree(sim)


def test_clearing_one_instance_runs_it_again_and_reopens_its_task() -> None:
    sim = sim_of(mapped("m", over=["a", "b"]), task("after", "m"))
    for grant in lease_all(sim):
        sim.complete(grant, now=at(2))
    sim.run_task("after", now=at(3))
    assert str(sim.run().state) == "success"
    cleared = sim.apply(
        c.ClearTasks(
            request_id=sim.rid(),
            now=at(4),
            dag_id="d",
            run_id=run_id(),
            task_ids=("m[1]",),
            include_downstream=True,
        )
    )
    assert cleared.ok and cleared.value == ("after", "m[1]")
    assert sim.states() == {
        "m": "none",
        "m[0]": "success",
        "m[1]": "queued",
        "after": "none",
    }
    again = lease_all(sim, at(5))
    assert [g.lease.key.task_id for g in again] == ["m[1]"] and again[0].lease.try_number == 2
    sim.complete(again[0], now=at(6))
    assert sim.states()["m"] == "success" and sim.states()["after"] == "queued"
    check_replicas_agree(sim)


def test_clearing_the_mapped_task_expands_it_again_from_the_new_value() -> None:
    sim = sim_of(task("make"), mapped("m", "make", over="make"))
    sim.complete(sim.lease(now=at(1))[0], now=at(2), result_json="[1,2,3]")
    running = lease_all(sim, at(3))
    assert len(running) == 3
    sim.complete(running[0], now=at(4))
    cleared = sim.apply(
        c.ClearTasks(
            request_id=sim.rid(),
            now=at(5),
            dag_id="d",
            run_id=run_id(),
            task_ids=("make",),
            include_downstream=True,
        )
    )
    assert cleared.ok and cleared.value == ("m", "make")
    assert sim.states() == {"make": "queued", "m": "none"}
    # the revoked instances' workers are refused
    late = sim.complete(running[1], now=at(6))
    assert not late.ok
    sim.complete(sim.lease(now=at(7))[0], now=at(8), result_json="[1]")
    assert sim.states() == {"make": "success", "m": "none", "m[0]": "queued"}
    check_replicas_agree(sim)


def test_an_instance_lease_carries_its_item() -> None:
    sim = sim_of(task("make"), mapped("m", "make", over="make"))
    sim.complete(sim.lease(now=at(1))[0], now=at(2), result_json='["echo 0","echo 1"]')
    grants = sorted(lease_all(sim, at(3)), key=lambda g: g.lease.key.task_id)
    key = grants[1].lease.key
    ups = xcom.upstream_results(sim.state, key)
    assert ups == {"make": '["echo 0","echo 1"]'}
    assert grants[1].task.task_id == "m"
    assert mapping.instance_task(grants[1].task, 1, ups).command == "echo 1"
    # a python instance gets its item as a placeholder the worker resolves after rendering
    expand = json.dumps({"args": [["x", {REF: "make", "path": ["rows"]}]]})
    spec = replace(task("p", "make"), kind="python", callable_name="f", expand_json=expand)
    ups = {"make": '{"rows":[0,1,2,3,4]}'}
    kwargs = json.loads(mapping.instance_task(spec, 4, ups).kwargs_json)
    assert kwargs == {"x": {REF: "make", "path": ["rows", 4]}}
    # the value changed since the expansion (a cleared upstream): the attempt fails saying so
    assert "not the list it was expanded over" in mapping.instance_task(spec, 4, {}).kwargs_json
    failing = mapping.instance_task(grants[1].task, 1, {})
    assert "exit 1" in str(failing.command) and "expanded over" in str(failing.command)


@pytest.mark.parametrize(
    ("tasks", "problem"),
    [
        ((task("make"), mapped("m", over="make")), "maps over 'make', not an upstream task"),
        ((mapped("m" * 246, over=["a"]),), "the limit is 243"),
        ((task("m[0]"), mapped("m", over=["a"])), "ends like a mapped instance's id"),
        ((mapped("m", over=["a"], max_map_length=10_001),), "max_map_length"),
    ],
)
def test_a_mapped_spec_out_of_bounds_is_refused(tasks: tuple, problem: str) -> None:
    result = Sim().register(dag("d", *tasks))
    assert not result.ok and problem in str(result.value)


def test_instance_ids_are_parsed_strictly() -> None:
    assert mapping.split_id("m[12]") == ("m", 12)
    assert mapping.split_id("m[012]") == ("m[012]", -1)
    assert mapping.split_id("m") == ("m", -1)
    assert mapping.split_id("[3]") == ("[3]", -1)


# -- property: every index runs once, whatever the interleaving --------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(min_value=0, max_value=12),
    steps=st.lists(
        st.tuples(st.sampled_from(["ok", "fail", "expire", "lease"]), st.integers(0, 50)),
        max_size=80,
    ),
)
def test_every_mapped_index_succeeds_exactly_once(n: int, steps: list[tuple[str, int]]) -> None:
    """Arbitrary interleavings of outcomes, failures and lease expiries (retries=2): at the
    end, with every remaining attempt succeeding, each index succeeded once, its attempts
    never overlapped, and the downstream got the list in order."""
    sim = sim_of(
        task("make"),
        mapped("m", "make", over="make", retries=2, retry_delay_seconds=0.0),
        task("after", "m", trigger_rule="all_done"),
    )
    sim.complete(sim.lease(now=at(1))[0], now=at(1), result_json=json.dumps(list(range(n))))
    clock = 2.0
    held: list[Any] = []
    successes: dict[str, int] = {}

    def tick() -> Any:
        nonlocal clock
        clock += 1
        return at(clock)

    def requeue() -> None:
        due = [
            c.QueueDecision(ti.key, TaskState.UP_FOR_RETRY, ti.try_number)
            for ti in sim.state.task_instances("d", run_id())
            if ti.state is TaskState.UP_FOR_RETRY
        ]
        if due:
            sim.apply(c.QueueTasks(request_id=sim.rid(), now=tick(), items=tuple(due)))

    def finish(grant: Any, success: bool, value: str = "") -> None:
        result = sim.complete(grant, success=success, now=tick(), result_json=value)
        if result.ok and success:
            key = grant.lease.key.task_id
            successes[key] = successes.get(key, 0) + 1

    for action, pick in steps:
        requeue()
        if action == "lease" or not held:
            held += sim.lease(n=3, now=tick(), ttl=5.0)
            continue
        grant = held.pop(pick % len(held))
        index = mapping.split_id(grant.lease.key.task_id)[1]
        if action == "ok":
            finish(grant, True, json.dumps(index * 2))
        elif action == "fail":
            finish(grant, False)
        else:  # its lease runs out: the leader's ExpireLeases
            ref = c.LeaseRef(grant.lease.key, grant.lease.token)
            sim.apply(c.ExpireLeases(request_id=sim.rid(), now=at(clock + 100), leases=(ref,)))
            clock += 100
    for _ in range(200):  # the rest succeed
        requeue()
        for grant in held:
            finish(grant, True, json.dumps(mapping.split_id(grant.lease.key.task_id)[1] * 2))
        held = sim.lease(n=50, now=tick(), ttl=5.0)
        if not held and sim.ti("after").state is not TaskState.NONE:
            break
    states = sim.states()
    instance_ids = [t for t in states if mapping.is_instance(t)]
    assert sorted(instance_ids) == sorted(mapping.instance_id("m", i) for i in range(n))
    for i in range(n):
        ti = sim.ti(f"m[{i}]")
        assert ti.try_number <= 3
        assert ti.state in (TaskState.SUCCESS, TaskState.FAILED)
        assert successes.get(f"m[{i}]", 0) == (1 if ti.state is TaskState.SUCCESS else 0)
    if n == 0:
        assert states["m"] == "skipped"
    if sim.ti("m").state is TaskState.SUCCESS:
        up = xcom.upstream_results(sim.state, TaskKey("d", run_id(), "after"))
        assert json.loads(up["m"]) == [i * 2 for i in range(n)]
    assert sim.ti("after").state is not TaskState.NONE
    assert sim.state.digest() == sim.state.recompute_digest()


def test_a_mapped_dag_waits_for_the_upgrade_gate() -> None:
    """A release that does not know mapping would apply such a spec as an unmapped task: the
    gate refuses it while the cluster runs that release; an unmapped DAG passes as before."""
    mapped_dag = c.RegisterDags(request_id="r", now=at(0), specs=(dag("d", mapped("m", over=[1])),))
    plain = c.RegisterDags(request_id="r", now=at(0), specs=(dag("d", task("m")),))
    reason = versions.refusal(mapped_dag, versions.BASELINE_RELEASE)
    assert reason is not None and "expand_json" in reason
    assert versions.refusal(plain, versions.BASELINE_RELEASE) is None
    assert versions.refusal(mapped_dag, versions.RELEASE) is None
