"""Scenarios: trigger rules, leasing, fencing tokens, retries, expiry, release, clear, mark."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from test_state_harness import T0, Sim, at, dag, run_id, task

from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core.model import RunState, TaskKey, TaskState


def diamond(rule: str) -> Sim:
    """ok -> join <- bad (both roots); join -> after; ``join`` has ``rule``."""
    sim = Sim()
    sim.register(
        dag(
            "d",
            task("ok"),
            task("bad"),
            task("join", "ok", "bad", trigger_rule=rule),
            task("after", "join"),
        )
    )
    sim.create("d")
    return sim


@pytest.mark.parametrize(
    ("rule", "outcomes", "join", "after", "run_state"),
    [
        # outcomes: success of (ok, bad), in that order
        ("all_success", (True, True), "success", "success", "success"),
        ("all_success", (True, False), "upstream_failed", "upstream_failed", "failed"),
        ("all_failed", (False, False), "success", "success", "success"),
        ("all_failed", (True, False), "skipped", "skipped", "success"),
        ("all_done", (True, False), "success", "success", "success"),
        ("one_success", (False, True), "success", "success", "success"),
        ("one_success", (False, False), "upstream_failed", "upstream_failed", "failed"),
        ("one_failed", (True, False), "success", "success", "success"),
        ("one_failed", (True, True), "skipped", "skipped", "success"),
        ("none_failed", (True, True), "success", "success", "success"),
        ("none_failed", (True, False), "upstream_failed", "upstream_failed", "failed"),
    ],
)
def test_trigger_rules_end_to_end(
    rule: str, outcomes: tuple[bool, bool], join: str, after: str, run_state: str
) -> None:
    sim = diamond(rule)
    sim.run_task("ok", outcomes[0])
    sim.run_task("bad", outcomes[1])
    while sim.state.queued_count:
        sim.run_task(_next_queued(sim))
    assert sim.states()["join"] == join
    assert sim.states()["after"] == after
    assert sim.run().state == run_state  # Airflow: the leaves decide (a failed root does not)


def _next_queued(sim: Sim) -> str:
    return next(t for t, s in sim.states().items() if s == "queued")


def test_one_success_runs_before_every_upstream_is_done() -> None:
    sim = diamond("one_success")
    sim.run_task("ok")
    assert sim.states()["join"] == "queued"
    assert sim.states()["bad"] == "queued"


def test_upstream_failed_propagates_down_a_chain() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b", "a"), task("c", "b"), task("z", "c")))
    sim.create("d")
    sim.run_task("a", success=False, now=at(7))
    assert sim.states() == {
        "a": "failed",
        "b": "upstream_failed",
        "c": "upstream_failed",
        "z": "upstream_failed",
    }
    assert sim.ti("z").end_date == at(7)
    assert sim.run().state is RunState.FAILED


def test_run_succeeds_when_only_a_non_leaf_failed_but_leaves_are_fine() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("cleanup", "a", trigger_rule="all_done")))
    sim.create("d")
    sim.run_task("a", success=False)
    sim.run_task("cleanup")
    assert sim.run().state is RunState.SUCCESS  # Airflow: the leaves decide


# -- leasing ---------------------------------------------------------------------------------


def test_lease_grants_token_ttl_and_run_info() -> None:
    sim = Sim()
    sim.register(dag("d", task("a", priority_weight=1), task("b", priority_weight=5)))
    sim.create("d", conf=None)
    grants = sim.lease(n=5, now=at(10), ttl=60)
    assert [g.lease.key.task_id for g in grants] == ["b", "a"]  # priority first
    grant = grants[0]
    assert grant.lease.token == sim.index and grant.try_number == 1
    assert grant.lease.expires_at == at(70)
    assert grant.fileloc == "/dags/d.py" and grant.logical_date == T0 and grant.max_tries == 1
    assert grant.task.task_id == "b" and grant.to_dict()["task"]["priority_weight"] == 5
    ti = sim.ti("b")
    assert ti.state is TaskState.RUNNING and ti.lease == grant.lease and ti.try_number == 1
    assert sim.state.leases() == [grants[0].lease, grants[1].lease]
    assert sim.lease() == []


def test_max_active_tasks_spans_runs_of_a_dag() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b"), max_active_tasks=2))
    sim.register(dag("e", task("x")))
    sim.create("d")
    sim.create("d", T0 + timedelta(days=1))
    sim.create("e")
    grants = sim.lease(n=10)
    assert sorted(g.lease.key.dag_id for g in grants) == ["d", "d", "e"]
    assert sim.state.running_task_count("d") == 2
    sim.complete(grants[0])
    assert len(sim.lease(n=10)) == 1  # a slot freed: one more of d


def test_raising_max_active_tasks_unblocks() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b"), max_active_tasks=1))
    sim.create("d")
    assert len(sim.lease(n=10)) == 1
    sim.register(dag("d", task("a"), task("b"), max_active_tasks=5))
    assert len(sim.lease(n=10)) == 1


def test_paused_dag_tasks_are_not_leased() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    sim.create("d")
    sim.apply(c.SetPaused(request_id="p", now=T0, dag_id="d", paused=True))
    assert sim.lease() == []
    sim.apply(c.SetPaused(request_id="u", now=T0, dag_id="d", paused=False))
    assert len(sim.lease()) == 1


def test_duplicate_lease_request_returns_the_same_grants() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    sim.create("d")
    cmd = c.LeaseTasks(request_id="lease-1", now=T0, worker_id="w1")
    first = sim.apply(cmd)
    again = sim.apply(cmd)
    assert again.duplicate and again.value == first.value
    assert sim.ti("a").try_number == 1


# -- fencing ---------------------------------------------------------------------------------


def fenced_sim() -> tuple[Sim, c.LeaseRef]:
    sim = Sim()
    sim.register(dag("d", task("a", retries=1, retry_delay_seconds=10), task("b", "a")))
    sim.create("d")
    [grant] = sim.lease()
    return sim, c.LeaseRef(grant.lease.key, grant.lease.token)


STALE_TABLE = [
    (
        "heartbeat",
        lambda ref: c.HeartbeatLeases(request_id="h", now=T0, worker_id="w1", leases=(ref,)),
    ),
    (
        "complete",
        lambda ref: c.CompleteAttempt(
            request_id="x", now=T0, key=ref.key, token=ref.token, success=True
        ),
    ),
    (
        "logs",
        lambda ref: c.AppendLogs(
            request_id="l",
            now=T0,
            key=ref.key,
            token=ref.token,
            chunks=(c.LogChunk("stdout", "x"),),
        ),
    ),
    (
        "release",
        lambda ref: c.ReleaseLeases(request_id="rl", now=T0, worker_id="w1", leases=(ref,)),
    ),
    ("expire", lambda ref: c.ExpireLeases(request_id="e", now=at(100), leases=(ref,))),
]


@pytest.mark.parametrize(("name", "make"), STALE_TABLE)
def test_stale_token_is_refused(name: str, make) -> None:
    sim, ref = fenced_sim()
    stale = c.LeaseRef(ref.key, ref.token - 1)
    before = sim.state.snapshot()
    result = sim.apply(make(stale))
    assert not result.ok and result.reason == r.STALE_TOKEN, name
    after = sim.state.snapshot()
    assert after["runs"] == before["runs"] and after["outbox"] == before["outbox"]
    ghost = replace(make(c.LeaseRef(TaskKey("d", "nope", "a"), ref.token)), request_id="g")
    assert sim.apply(ghost).reason == r.UNKNOWN_TASK


def test_complete_twice_second_is_stale() -> None:
    sim, ref = fenced_sim()
    done = c.CompleteAttempt(request_id="c1", now=T0, key=ref.key, token=ref.token, success=True)
    assert sim.apply(done).ok
    again = c.CompleteAttempt(request_id="c2", now=T0, key=ref.key, token=ref.token, success=True)
    assert sim.apply(again).reason == r.STALE_TOKEN


def test_heartbeat_extends_and_checks_the_worker() -> None:
    sim, ref = fenced_sim()
    hb = c.HeartbeatLeases(request_id="h1", now=at(20), worker_id="w1", leases=(ref,))
    assert sim.apply(hb).value[0] == (True, "", at(50))
    assert sim.ti("a").lease.expires_at == at(50)
    assert sim.state.expired_leases(at(40)) == []
    other = c.HeartbeatLeases(request_id="h2", now=at(20), worker_id="w2", leases=(ref,))
    assert sim.apply(other).reason == r.WRONG_WORKER


def test_logs_are_numbered_per_attempt() -> None:
    sim, ref = fenced_sim()
    chunks = (c.LogChunk("stdout", "hello\n"), c.LogChunk("stderr", "oops\n"))
    assert sim.apply(
        c.AppendLogs(request_id="l1", now=at(1), key=ref.key, token=ref.token, chunks=chunks)
    ).ok
    last = (c.LogChunk("stdout", "bye\n"),)
    sim.apply(
        c.CompleteAttempt(
            request_id="c", now=at(2), key=ref.key, token=ref.token, success=True, chunks=last
        )
    )
    logs = sim.outbox("task_log")
    assert [(x["chunk_seq"], x["stream"], x["text"]) for x in logs] == [
        (1, "stdout", "hello\n"),
        (2, "stderr", "oops\n"),
        (3, "stdout", "bye\n"),
    ]
    assert logs[0] == {
        "dag_id": "d",
        "run_id": run_id(),
        "task_id": "a",
        "try_number": 1,
        "chunk_seq": 1,
        "stream": "stdout",
        "text": "hello\n",
        "created_at": at(1).isoformat(),
    }
    bad = c.AppendLogs(
        request_id="l2", now=at(1), key=ref.key, token=ref.token, chunks=(c.LogChunk("x", "y"),)
    )
    assert sim.apply(bad).reason in (r.INVALID, r.STALE_TOKEN)


# -- retries and expiry ----------------------------------------------------------------------


def test_retries_with_exponential_backoff_and_cap() -> None:
    sim = Sim()
    spec = task(
        "a",
        retries=4,
        retry_delay_seconds=10,
        retry_exponential_backoff=True,
        max_retry_delay_seconds=30,
    )
    sim.register(dag("d", spec))
    sim.create("d")
    now, delays = T0, []
    for attempt in range(1, 5):
        [grant] = sim.lease(now=now)
        assert grant.try_number == attempt
        sim.complete(grant, success=False, now=now)
        ti = sim.ti("a")
        assert ti.state is TaskState.UP_FOR_RETRY
        delays.append((ti.next_retry_at - now).total_seconds())
        assert sim.state.ready_to_queue(ti.next_retry_at - timedelta(seconds=1)) == []
        early = c.QueueTasks(
            request_id=sim.rid(),
            now=now,
            items=(c.QueueDecision(ti.key, TaskState.UP_FOR_RETRY, attempt),),
        )
        assert sim.apply(early).value[0].reason == r.NOT_DUE
        now = ti.next_retry_at
        due = sim.state.ready_to_queue(now)
        assert due == [c.QueueDecision(ti.key, TaskState.UP_FOR_RETRY, attempt)]
        assert sim.apply(c.QueueTasks(request_id=sim.rid(), now=now, items=tuple(due))).ok
    assert delays == [10, 20, 30, 30]
    [grant] = sim.lease(now=now)
    sim.complete(grant, success=False, now=now)
    assert sim.ti("a").state is TaskState.FAILED and sim.ti("a").try_number == 5
    assert sim.run().state is RunState.FAILED


def test_queue_decision_compare_and_set() -> None:
    sim, ref = fenced_sim()
    wrong = c.QueueDecision(ref.key, TaskState.UP_FOR_RETRY, 1)
    assert (
        sim.apply(c.QueueTasks(request_id="q", now=T0, items=(wrong,))).value[0].reason
        == r.STATE_CHANGED
    )
    b = TaskKey("d", run_id(), "b")
    early = c.QueueDecision(b, TaskState.NONE, 0)
    assert (
        sim.apply(c.QueueTasks(request_id="q2", now=T0, items=(early,))).value[0].reason
        == r.NOT_READY
    )
    never = c.QueueTasks(request_id="q3", now=T0, unreachable=((b, TaskState.UPSTREAM_FAILED),))
    assert sim.apply(never).value[0].reason == r.NOT_READY


def test_expired_lease_goes_up_for_retry_then_fails() -> None:
    sim, ref = fenced_sim()
    assert sim.state.expired_leases(at(29)) == []
    assert sim.state.expired_leases(at(30)) == [ref]
    early = c.ExpireLeases(request_id="e0", now=at(10), leases=(ref,))
    assert sim.apply(early).value[0].reason == r.NOT_EXPIRED
    assert sim.apply(c.ExpireLeases(request_id="e1", now=at(30), leases=(ref,))).ok
    ti = sim.ti("a")
    assert ti.state is TaskState.UP_FOR_RETRY and ti.next_retry_at == at(40)
    assert "lease expired" in ti.message
    sim.apply(
        c.QueueTasks(request_id="q", now=at(40), items=tuple(sim.state.ready_to_queue(at(40))))
    )
    [grant] = sim.lease(now=at(40))
    ref2 = c.LeaseRef(grant.lease.key, grant.lease.token)
    assert ref2.token > ref.token
    assert sim.apply(c.ExpireLeases(request_id="e2", now=at(71), leases=(ref2,))).ok
    assert sim.states() == {"a": "failed", "b": "upstream_failed"}
    assert sim.state.expired_leases(at(1000)) == []


def test_release_requeues_without_counting_an_attempt() -> None:
    sim, ref = fenced_sim()
    assert sim.apply(c.ReleaseLeases(request_id="r", now=T0, worker_id="w1", leases=(ref,))).ok
    ti = sim.ti("a")
    assert ti.state is TaskState.QUEUED and ti.try_number == 0 and ti.lease is None
    [grant] = sim.lease(worker="w2")
    assert grant.try_number == 1 and grant.lease.worker_id == "w2"
    rows = [x for x in sim.outbox("task_instance") if x["task_id"] == "a"]
    assert [(x["try_number"], x["state"]) for x in rows] == [
        (1, "queued"),
        (1, "running"),
        (1, "queued"),
        (1, "running"),
    ]


# -- clear and mark --------------------------------------------------------------------------


def test_clear_with_downstream_reruns_and_extends_tries() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b", "a", retries=2), task("c", "b")))
    sim.create("d")
    sim.run_task("a")
    sim.run_task("b", success=False)
    assert sim.states()["c"] in ("none", "upstream_failed")
    # b is up for retry; clear a and everything downstream
    cmd = c.ClearTasks(request_id="clr", now=at(5), dag_id="d", run_id=run_id(), task_ids=("a",))
    result = sim.apply(cmd)
    assert result.ok and result.value == ("a", "b", "c")
    assert sim.states() == {"a": "queued", "b": "none", "c": "none"}
    assert sim.ti("a").max_tries == 2 and sim.ti("b").max_tries == 1 + 3
    assert sim.run().state is RunState.RUNNING
    sim.run_task("a", now=at(6))
    sim.run_task("b", now=at(7))
    sim.run_task("c", now=at(8))
    assert sim.run().state is RunState.SUCCESS


def test_clear_finished_run_reopens_it_and_revokes_running_leases() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b")))
    sim.create("d")
    sim.run_task("a", success=False)
    [grant] = sim.lease()
    cmd = c.ClearTasks(
        request_id="clr",
        now=at(1),
        dag_id="d",
        run_id=run_id(),
        task_ids=(),
        include_downstream=False,
    )
    assert sim.apply(cmd).value == ("a", "b")  # no task ids: the whole run
    assert sim.complete(grant).reason == r.STALE_TOKEN
    assert sim.states() == {"a": "queued", "b": "queued"}
    rows = [
        (x["task_id"], x["try_number"], x["state"], x["message"])
        for x in sim.outbox("task_instance")
    ]
    assert ("b", 1, "failed", "cleared while running") in rows
    assert ("b", 2, "queued", "") in rows
    assert sim.state.active_run_count("d") == 1


def test_clear_and_mark_refusals() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    sim.create("d")
    unknown_run = c.ClearTasks(request_id="1", now=T0, dag_id="d", run_id="x", task_ids=("a",))
    assert sim.apply(unknown_run).reason == r.UNKNOWN_RUN
    unknown_task = c.MarkTasks(
        request_id="2",
        now=T0,
        dag_id="d",
        run_id=run_id(),
        task_ids=("zz",),
        state=TaskState.SUCCESS,
    )
    assert sim.apply(unknown_task) == r.Result(False, r.UNKNOWN_TASK, ("zz",))
    bad_state = c.MarkTasks(
        request_id="3", now=T0, dag_id="d", run_id=run_id(), task_ids=("a",), state=TaskState.QUEUED
    )
    assert sim.apply(bad_state).reason == r.INVALID


def test_mark_success_revokes_the_lease_and_moves_on() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b", "a")))
    sim.create("d")
    [grant] = sim.lease()
    mark = c.MarkTasks(
        request_id="m",
        now=at(3),
        dag_id="d",
        run_id=run_id(),
        task_ids=("a",),
        state=TaskState.SUCCESS,
    )
    assert sim.apply(mark).ok
    assert sim.states() == {"a": "success", "b": "queued"}
    assert sim.state.leases() == []
    hb = c.HeartbeatLeases(
        request_id="h",
        now=at(4),
        worker_id="w1",
        leases=(c.LeaseRef(grant.lease.key, grant.lease.token),),
    )
    assert sim.apply(hb).reason == r.STALE_TOKEN
    mark_b = c.MarkTasks(
        request_id="m2",
        now=at(5),
        dag_id="d",
        run_id=run_id(),
        task_ids=("b",),
        state=TaskState.FAILED,
    )
    assert sim.apply(mark_b).ok
    assert sim.ti("b").try_number == 1  # marking stands in for the attempt it replaces
    assert sim.run().state is RunState.FAILED
    mark_b_ok = c.MarkTasks(
        request_id="m3",
        now=at(6),
        dag_id="d",
        run_id=run_id(),
        task_ids=("b",),
        state=TaskState.SUCCESS,
    )
    sim.apply(mark_b_ok)
    assert sim.run().state is RunState.SUCCESS
    rows = [(x["task_id"], x["try_number"], x["state"]) for x in sim.outbox("task_instance")]
    assert rows[-1] == ("b", 1, "success")
