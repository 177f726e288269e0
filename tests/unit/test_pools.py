"""Pools in the state machine (core/pool_table.py, core/handlers_pools.py): a pool's slots
are never over-granted, under any interleaving of grants, outcomes, releases, expiries and
leader changes (a restored replica); default_pool is unlimited until set; an unknown pool
grants nothing; the table is digested and snapshotted only once it holds a pool."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_state_harness import T0, Sim, at, dag, task

from raftsched.core import commands as c
from raftsched.core import pool_commands as pc
from raftsched.core import results as r
from raftsched.core import versions as vs
from raftsched.core.handlers_pools import UNKNOWN_POOL
from raftsched.core.model import TaskSpec, TaskState
from raftsched.core.pool_table import DEFAULT_POOL, pool_of, slots_of
from raftsched.core.state import SchedulerState


def pooled(task_id: str, pool: str = "p", slots: int = 1, **kw: object) -> TaskSpec:
    return dataclasses.replace(task(task_id, **kw), pool=pool, pool_slots=slots)


def set_pool(sim: Sim, name: str, slots: int, now=T0, description: str = "") -> r.Result:
    return sim.apply(
        pc.SetPool(request_id=sim.rid(), now=now, name=name, slots=slots, description=description)
    )


def sim_with(*tasks: TaskSpec, pools: dict[str, int] | None = None) -> Sim:
    sim = Sim()
    for name, slots in (pools or {}).items():
        assert set_pool(sim, name, slots).ok
    assert sim.register(dag("d", *tasks)).ok
    assert sim.create("d").ok
    return sim


def used(state: SchedulerState) -> dict[str, int]:
    """Slots held per pool, recomputed from the running task instances."""
    out: dict[str, int] = {}
    for rec in state.run_table.records():
        for ti in rec.tis.values():
            if ti.state is TaskState.RUNNING:
                spec = rec.topo.tasks[ti.key.task_id.split("[")[0]]
                out[pool_of(spec)] = out.get(pool_of(spec), 0) + slots_of(spec)
    return out


def agree(sim: Sim) -> SchedulerState:
    assert sim.state.digest() == sim.state.recompute_digest()
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()
    return restored


def test_a_pool_of_two_grants_two_and_a_slot_frees_when_an_attempt_ends() -> None:
    sim = sim_with(*(pooled(f"t{i}") for i in range(5)), task("free"), pools={"p": 2})
    grants = sim.lease(n=10, now=at(1))
    got = sorted(g.lease.key.task_id for g in grants)
    assert len([t for t in got if t.startswith("t")]) == 2 and "free" in got
    assert sim.state.pools.used("p") == 2 and sim.state.pools.room("p") == 0
    assert sim.lease(n=10, now=at(2)) == []  # full: nothing more
    first = next(g for g in grants if g.lease.key.task_id.startswith("t"))
    assert sim.complete(first, now=at(3)).ok
    assert len(sim.lease(n=10, now=at(4))) == 1
    assert used(sim.state) == {"p": 2, DEFAULT_POOL: 1}
    agree(sim)


def test_an_expired_or_released_lease_gives_its_slot_back() -> None:
    sim = sim_with(*(pooled(f"t{i}") for i in range(3)), pools={"p": 1})
    grant = sim.lease(n=5, now=at(1), ttl=10)[0]
    ref = c.LeaseRef(grant.lease.key, grant.lease.token)
    assert sim.apply(c.ExpireLeases(request_id=sim.rid(), now=at(20), leases=(ref,))).ok
    assert sim.state.pools.used("p") == 0
    grant = sim.lease(n=5, now=at(21))[0]
    ref = c.LeaseRef(grant.lease.key, grant.lease.token)
    assert sim.apply(
        c.ReleaseLeases(request_id=sim.rid(), now=at(22), worker_id="w1", leases=(ref,))
    ).ok
    assert sim.state.pools.used("p") == 0
    assert len(sim.lease(n=5, now=at(23))) == 1


def test_pool_slots_count_and_a_big_task_waits_for_room() -> None:
    sim = sim_with(
        pooled("big", slots=3, priority_weight=9), pooled("small", slots=1), pools={"p": 3}
    )
    grants = sim.lease(n=5, now=at(1))
    assert [g.lease.key.task_id for g in grants] == ["big"]
    assert sim.state.pools.used("p") == 3
    assert sim.complete(grants[0], now=at(2)).ok
    assert [g.lease.key.task_id for g in sim.lease(n=5, now=at(3))] == ["small"]


def test_an_unknown_pool_grants_nothing_until_it_is_set() -> None:
    sim = sim_with(pooled("t", pool="etl"), task("other"))
    assert [g.lease.key.task_id for g in sim.lease(n=5, now=at(1))] == ["other"]
    assert sim.states()["t"] == "queued"
    assert set_pool(sim, "etl", 1, now=at(2)).ok
    assert [g.lease.key.task_id for g in sim.lease(n=5, now=at(3))] == ["t"]


def test_default_pool_is_unlimited_until_set_and_again_once_deleted() -> None:
    sim = sim_with(*(task(f"t{i}") for i in range(6)))
    assert len(sim.lease(n=2, now=at(1))) == 2
    assert set_pool(sim, DEFAULT_POOL, 3, now=at(2)).ok
    assert len(sim.lease(n=10, now=at(3))) == 1  # 2 already hold default_pool's slots
    delete = pc.DeletePool(request_id=sim.rid(), now=at(4), name=DEFAULT_POOL)
    assert sim.apply(delete).ok
    assert len(sim.lease(n=10, now=at(5))) == 3
    again = sim.apply(pc.DeletePool(request_id=sim.rid(), now=at(6), name=DEFAULT_POOL))
    assert not again.ok and again.reason == UNKNOWN_POOL


def test_set_pool_is_bounded_idempotent_and_persisted_only_from_release_3() -> None:
    sim = Sim()
    assert not set_pool(sim, "p", -1).ok
    assert not set_pool(sim, "", 1).ok
    assert not set_pool(sim, "p", 1, description="x" * 1001).ok
    before = sim.state.digest()
    assert set_pool(sim, "p", 2, description="etl").ok
    assert sim.state.digest() != before
    assert set_pool(sim, "p", 2, description="etl").reason == r.UNCHANGED
    assert sim.outbox("pool") == []  # cluster version 1: nothing reaches the DB
    assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=T0, version=vs.RELEASE)).ok
    assert set_pool(sim, "p", 4).ok
    assert sim.apply(pc.DeletePool(request_id=sim.rid(), now=T0, name="p")).ok
    rows = sim.outbox("pool")
    assert [(row["name"], row["slots"]) for row in rows] == [("p", 4), ("p", None)]
    agree(sim)


def test_a_state_without_pools_snapshots_as_before_and_pools_restore() -> None:
    sim = sim_with(task("a"))
    assert "pools" not in sim.state.snapshot()
    assert set_pool(sim, "p", 2).ok
    restored = agree(sim)
    assert restored.pools.get("p") is not None and restored.pools.get("p").slots == 2


def test_the_gate_refuses_pools_until_the_cluster_runs_release_3() -> None:
    base = vs.BASELINE_RELEASE
    command = pc.SetPool(request_id="x", now=T0, name="p", slots=1)
    assert "SetPool" in (vs.refusal(command, base) or "")
    assert vs.refusal(command, vs.RELEASE) is None
    spec = dag("d", pooled("t", pool="p", slots=2))
    register = c.RegisterDags(request_id="r", now=T0, specs=(spec,))
    assert "pool" in (vs.refusal(register, base) or "")
    assert vs.refusal(register, vs.RELEASE) is None


# -- never over-granted, whatever happens ---------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("lease"), st.integers(1, 6)),
        st.tuples(st.just("complete"), st.integers(0, 50), st.booleans()),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("expire"), st.integers(0, 50)),
        st.tuples(st.just("resize"), st.integers(-2, 2)),
        st.tuples(st.just("leader"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.integers(1, 3))
def test_a_pool_never_grants_more_slots_than_it_has(ops: list[tuple], size: int) -> None:
    tasks = [pooled(f"t{i}", slots=1 + i % 2, retries=2, retry_delay_seconds=0.0) for i in range(8)]
    sim = sim_with(*tasks, pools={"p": size + 1})
    slots = size + 1
    clock = 1.0
    for op in ops:
        clock += 1
        before = sim.state.pools.used("p")
        running = [
            ti
            for rec in sim.state.run_table.records()
            for ti in rec.tis.values()
            if ti.state is TaskState.RUNNING
        ]
        if op[0] == "lease":
            sim.lease(n=op[1], now=at(clock), ttl=5)
        elif op[0] == "resize":  # a shrunk pool stops nothing, and grants nothing past it
            slots = max(0, slots + op[1])
            assert set_pool(sim, "p", slots, now=at(clock)).ok
        elif op[0] == "leader":  # a new leader: a replica restored from a snapshot goes on
            restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
            assert restored.digest() == sim.state.digest()
            sim.state = restored
        elif running:
            ti = running[op[1] % len(running)]
            assert ti.lease is not None
            ref = c.LeaseRef(ti.key, ti.lease.token)
            if op[0] == "complete":
                sim.apply(
                    c.CompleteAttempt(
                        request_id=sim.rid(),
                        now=at(clock),
                        key=ti.key,
                        token=ref.token,
                        success=op[2],
                    )
                )
            elif op[0] == "release":
                sim.apply(
                    c.ReleaseLeases(
                        request_id=sim.rid(), now=at(clock), worker_id="w1", leases=(ref,)
                    )
                )
            else:
                clock += 10
                sim.apply(c.ExpireLeases(request_id=sim.rid(), now=at(clock), leases=(ref,)))
        for due in sim.state.ready_to_queue(at(clock)):  # retries come back (the leader's)
            sim.apply(c.QueueTasks(request_id=sim.rid(), now=at(clock), items=(due,)))
        held = used(sim.state).get("p", 0)
        assert held <= max(slots, before)  # a grant never takes a pool past its slots
        assert sim.state.pools.used("p") == held


def test_native_tasks_name_a_pool_and_a_spec_without_one_hashes_as_before() -> None:
    from datetime import datetime

    import pytest

    from raftsched import BashTask
    from raftsched.dags.dag import DAG
    from raftsched.errors import DagDefinitionError

    start = datetime(2024, 1, 1)
    with DAG("d", schedule=None, start_date=start) as plain:
        BashTask("a", command="true")
    with DAG("d", schedule=None, start_date=start) as named_default:
        BashTask("a", command="true", pool="default_pool", pool_slots=1)
    assert plain.to_spec().spec_hash == named_default.to_spec().spec_hash
    assert "pool" not in plain.to_spec().to_dict()["tasks"][0]
    with DAG("d", schedule=None, start_date=start) as pooled_dag:
        BashTask("a", command="true", pool="etl", pool_slots=4)
    spec = pooled_dag.to_spec().task("a")
    assert (spec.pool, spec.pool_slots) == ("etl", 4)
    for bad in ({"pool": "no spaces"}, {"pool_slots": 0}, {"pool_slots": True}):
        with DAG("e", schedule=None, start_date=start), pytest.raises(DagDefinitionError):
            BashTask("a", command="true", **bad)


def test_who_set_or_deleted_a_pool_is_in_the_audit_log() -> None:
    sim = Sim()
    assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=T0, version=vs.RELEASE)).ok
    for command in (
        pc.SetPool(request_id=sim.rid(), now=T0, name="etl", slots=4, actor="ops"),
        pc.SetPool(request_id=sim.rid(), now=T0, name="etl", slots=4, actor="ops"),
        pc.DeletePool(request_id=sim.rid(), now=T0, name="etl", actor="admin"),
    ):
        assert sim.apply(command).ok
    records = [(a["actor"], a["action"], a["detail"]) for a in sim.outbox("audit")]
    assert records == [
        ("ops", "set_pool", "etl 4 slots"),
        ("ops", "set_pool", "etl 4 slots unchanged"),
        ("admin", "delete_pool", "etl"),
    ]


def test_a_waiting_tasks_note_says_what_its_pool_lacks() -> None:
    from raftsched.api.servicers.pools import pool_rows, pool_waiting

    sim = sim_with(pooled("a"), pooled("b"), pooled("big", slots=3), pooled("lost", pool="gone"))
    assert set_pool(sim, "p", 1).ok
    sim.lease(n=1, now=at(1))
    st = sim.state
    assert pool_waiting(st, DEFAULT_POOL) == ""
    assert pool_waiting(st, "p") == "pool 'p' is full: 1 of 1 slots in use"
    assert pool_waiting(st, "p", 3) == "needs 3 slots of pool 'p', which has 1: raise it"
    assert pool_waiting(st, "gone").startswith("pool 'gone' does not exist: create it with")
    rows = {row["name"]: row for row in pool_rows(st)}
    assert next(iter(rows)) == DEFAULT_POOL and rows[DEFAULT_POOL]["slots"] == -1
    assert (rows["p"]["running_slots"], rows["p"]["queued_tasks"]) == (1, 2)
    assert (rows["gone"]["slots"], rows["gone"]["queued_tasks"]) == (0, 1)


def test_pool_gauges_show_slots_in_use_and_waiting_tasks() -> None:
    from raftsched.cluster import metrics

    sim = sim_with(pooled("a"), pooled("b"), task("free"), pools={"p": 1})
    sim.lease(n=5, now=at(1))
    rows = metrics._pools(sim.state)
    assert rows == [(DEFAULT_POOL, None, 1, 0), ("p", 1, 1, 1)]
    families = {f.name: f for f in metrics._pool_families(rows)}
    samples = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in families.values()
        for s in f.samples
    }
    assert ("raftsched_pool_slots", (("pool", "p"), ("state", "total")), 1.0) in samples
    assert ("raftsched_pool_queued_tasks", (("pool", "p"),), 1.0) in samples
    assert not any(s[1] == (("pool", DEFAULT_POOL), ("state", "total")) for s in samples)
