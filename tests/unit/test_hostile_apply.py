"""Hostile commands against the real state machine: apply is total and atomic.

Hypothesis feeds ``SchedulerState.apply`` sequences of commands that mix ordinary work (so
there are runs, leases and logs to hit) with hostile values: deep and huge JSON, NUL, lone
surrogates, 10k-character ids, years 1 and 9999, naive datetimes, negative and huge numbers,
NaN, wrong types and unknown ids. For every sequence:

- apply never raises and the state never stops (``halted`` would mean a handler raised);
- a command refused as a whole changes nothing but, for ordinary refusals, the request-id
  memory (the digest sum minus that one contribution is what it was before);
- the incremental digest equals a digest recomputed from scratch;
- a replica restored from a snapshot taken part-way, then fed the log's tail, ends with the
  same digest as the state that applied everything.
"""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import results as r
from raftsched.core.model import RunType, TaskKey, TaskState
from raftsched.core.state import SchedulerState
from tests.unit.test_state_harness import T0, Sim, at, dag, run_id, task


def _deep(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth):
        node["a"] = {}
        node = node["a"]
    return root


HOSTILE_TEXT = st.sampled_from(
    ["", "a\x00b", "\ud800", "x" * 10_000, "line\nbreak", "é" * 70_000, "ok", "\x7f"]
)
IDS = st.one_of(st.sampled_from(["d", "e", "ghost", "a", "b"]), HOSTILE_TEXT)
DATES = st.sampled_from(
    [
        T0,
        T0 + timedelta(days=1),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, tzinfo=UTC),
        datetime(2024, 1, 1),  # naive
        "2024-01-01",  # not a datetime at all
    ]
)
NUMBERS = st.sampled_from([-1, 0, 1, 3, 2**70, -(2**70), float("nan"), float("inf"), 1e308, "7"])
CONFS = st.sampled_from(
    [
        {},
        {"x": 1},
        _deep(40),
        _deep(5_000),
        {"big": "y" * 200_000},
        {"nul": "a\x00b"},
        {"sur": "\ud800"},
        {1: "int key"},
        {"nan": float("nan")},
        {"huge": 10**40},
        {"set": {1, 2}},
        ["not", "an", "object"],
        "text",
    ]
)


@st.composite
def hostile_command(draw: st.DrawFn, rid: str) -> c.Command:
    now = draw(st.one_of(st.just(at(draw(st.integers(0, 50)))), DATES))
    key = TaskKey(draw(IDS), draw(st.sampled_from([run_id(), draw(IDS)])), draw(IDS))
    token = draw(st.one_of(st.integers(-5, 60), NUMBERS))
    chunks = tuple(
        c.LogChunk(draw(st.sampled_from(["stdout", "stderr", "tty"])), draw(HOSTILE_TEXT))
        for _ in range(draw(st.integers(0, 3)))
    )
    kind = draw(st.integers(0, 11))
    if kind == 0:
        logical = draw(DATES)
        decision = c.RunDecision(
            draw(IDS),
            logical,
            draw(DATES),
            draw(DATES),
            run_type=draw(st.sampled_from([RunType.MANUAL, RunType.SCHEDULED, "bogus"])),
            conf=draw(CONFS),
            run_id=draw(st.one_of(st.just(""), IDS)),
        )
        return c.CreateRuns(request_id=rid, now=now, runs=(decision,))
    if kind == 1:
        return c.LeaseTasks(
            request_id=rid,
            now=now,
            worker_id=draw(IDS),
            max_tasks=draw(st.one_of(st.integers(0, 5), NUMBERS)),
            lease_ttl_seconds=draw(st.one_of(st.just(30.0), NUMBERS)),
        )
    if kind == 2:
        return c.CompleteAttempt(
            request_id=rid,
            now=now,
            key=key,
            token=token,
            success=draw(st.sampled_from([True, False, 1])),
            exit_code=draw(st.one_of(st.none(), NUMBERS)),
            message=draw(HOSTILE_TEXT),
            chunks=chunks,
        )
    if kind == 3:
        return c.AppendLogs(request_id=rid, now=now, key=key, token=token, chunks=chunks)
    if kind == 4:
        refs = (c.LeaseRef(key, token),)
        return c.HeartbeatLeases(
            request_id=rid,
            now=now,
            worker_id=draw(IDS),
            leases=refs,
            lease_ttl_seconds=draw(st.one_of(st.just(30.0), NUMBERS)),
        )
    if kind == 5:
        return c.ClearTasks(
            request_id=rid,
            now=now,
            dag_id=draw(IDS),
            run_id=draw(st.sampled_from([run_id(), "x" * 10_000])),
            task_ids=(draw(IDS),),
        )
    if kind == 6:
        return c.MarkTasks(
            request_id=rid,
            now=now,
            dag_id=draw(IDS),
            run_id=run_id(),
            task_ids=(draw(IDS),),
            state=draw(st.sampled_from([TaskState.SUCCESS, TaskState.RUNNING, "bogus"])),
        )
    if kind == 7:
        return c.AckMaterialized(
            request_id=rid,
            now=now,
            seq=draw(st.one_of(st.integers(-3, 40), NUMBERS)),
            finished_run_retention_seconds=draw(st.one_of(st.just(1.0), NUMBERS)),
        )
    if kind == 8:
        spec = dag(
            draw(IDS),
            task(draw(IDS)),
            description=draw(HOSTILE_TEXT),
            max_active_runs=draw(st.one_of(st.just(4), NUMBERS)),
            start_date=draw(st.one_of(st.none(), DATES)),
        )
        return c.RegisterDags(request_id=rid, now=now, specs=(spec,))
    if kind == 9:
        ref = c.LeaseRef(key, token)
        return c.ExpireLeases(request_id=rid, now=now, leases=(ref,))
    if kind == 10:
        return c.SetPaused(
            request_id=draw(st.sampled_from([rid, "x" * 10_000, "\x00"])),
            now=now,
            dag_id=draw(IDS),
            paused=draw(st.sampled_from([True, False, "yes"])),
        )
    inner = c.SetPaused(request_id=rid + "-in", now=now, dag_id="d", paused=False)
    nested = c.Batch(request_id=rid + "-b", now=now, commands=(inner,))
    return c.Batch(request_id=rid, now=now, commands=draw(st.sampled_from([(inner,), (nested,)])))


def _ordinary(sim: Sim, step: int) -> list[c.Command]:
    """Ordinary work between hostile commands, so they find runs, leases and logs to hit."""
    now = at(step)
    grants = sim.state.leases()
    out: list[c.Command] = [
        c.CreateRuns(
            request_id=sim.rid(),
            now=now,
            runs=(
                c.RunDecision(
                    "d", T0 + timedelta(days=step), T0, T0 + timedelta(days=step), RunType.MANUAL
                ),
            ),
        ),
        c.LeaseTasks(request_id=sim.rid(), now=now, worker_id="w1", max_tasks=2),
    ]
    for lease in grants[:1]:
        out.append(
            c.AppendLogs(
                request_id=sim.rid(),
                now=now,
                key=lease.key,
                token=lease.token,
                chunks=(c.LogChunk("stdout", f"step {step}\n"),),
            )
        )
    return out


WHOLE_REFUSALS = {r.INVALID, r.UNKNOWN_COMMAND, r.OUTBOX_FULL, r.HALTED, r.STALE_INDEX}


def _apply_checked(sim: Sim, command: c.Command) -> None:
    before = sim.state._sum.value
    seqs = (sim.state.outbox_acked_seq, sim.state.outbox_last_seq)
    result = sim.apply(command)  # must not raise
    assert sim.state.halted is None, sim.state.halted
    if result.ok or isinstance(command, c.Batch | c.CreateRuns | c.RegisterDags):
        return  # commands of many decisions refuse decision by decision
    after = sim.state._sum.value
    whole = result.reason in WHOLE_REFUSALS and (
        result.reason != r.INVALID or isinstance(result.value, str)
    )
    if whole and not result.duplicate:
        assert after == before, (command, result)
    elif not result.duplicate:  # refused, but remembered: only that memory changed
        remembered = dg.contribution(dg.fp_request(command.request_id, result))
        assert (after - remembered) % (1 << 128) == before, (type(command), result)
    assert (sim.state.outbox_acked_seq, sim.state.outbox_last_seq) == seqs


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data(), cut=st.integers(0, 30))
def test_hostile_sequences_never_break_apply(data: st.DataObject, cut: int) -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b", "a", retries=1, retry_delay_seconds=0.0)))
    steps = data.draw(st.integers(1, 12))
    for step in range(steps):
        for command in _ordinary(sim, step):
            _apply_checked(sim, command)
        for _ in range(data.draw(st.integers(1, 3))):
            _apply_checked(sim, data.draw(hostile_command(sim.rid())))
    assert sim.state.digest() == sim.state.recompute_digest()

    cut = min(cut, len(sim.log))
    replica = Sim()
    for command, index in sim.log[:cut]:
        replica.state.apply(command, log_index=index)
    restored = SchedulerState.restore(pickle.loads(pickle.dumps(replica.state.snapshot())))
    for command, index in sim.log[cut:]:
        restored.apply(command, log_index=index)
    assert restored.digest() == sim.state.digest()
    assert restored.recompute_digest() == sim.state.digest()


def test_a_refused_command_is_not_remembered_and_a_fixed_repeat_applies() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    bad = c.SetPaused(request_id="t1", now=T0, dag_id="x" * 300, paused=True)
    refused = sim.apply(bad)
    assert refused.reason == r.INVALID and "the limit is 250" in refused.value
    assert sim.apply(c.SetPaused(request_id="t1", now=T0, dag_id="d", paused=True)).ok
    # a run decision is refused alone, with the message in its item
    deep = c.RunDecision("d", T0, T0, T0, RunType.MANUAL, conf=_deep(100))
    item = sim.apply(c.CreateRuns(request_id="t2", now=T0, runs=(deep,))).value[0]
    assert item.reason == r.INVALID and "nested deeper than 32" in item.value


def test_a_handler_that_raises_stops_the_state_and_nothing_changes_after() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    assert sim.create("d").ok

    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    from raftsched.core import command_table

    original = command_table.HANDLERS[c.SetPaused]
    command_table.HANDLERS[c.SetPaused] = broken
    try:
        result = sim.apply(c.SetPaused(request_id="p", now=T0, dag_id="d", paused=True))
    finally:
        command_table.HANDLERS[c.SetPaused] = original
    assert result.reason == r.INTERNAL_ERROR and "RuntimeError: a bug" in result.value
    frozen = (sim.state.applied_index, sim.state.digest())
    later = sim.apply(c.SetPaused(request_id="q", now=T0, dag_id="d", paused=True))
    assert later.reason == r.HALTED
    assert (sim.state.applied_index, sim.state.digest()) == frozen
    restored = SchedulerState.restore(pickle.loads(pickle.dumps(sim.state.snapshot())))
    assert restored.halted == sim.state.halted


def test_a_slot_evicted_from_memory_is_still_refused_for_an_hour() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    day = T0 - timedelta(days=1)  # before the schedule's last slot: not parked
    sim.create("d")  # the scheduler's run at T0
    manual = c.RunDecision("d", day, day, day, RunType.MANUAL)
    assert sim.apply(c.CreateRuns(request_id="m1", now=T0, runs=(manual,))).ok
    for grant in sim.lease(n=10, now=at(1)):
        assert sim.complete(grant, now=at(1)).ok
    ack = sim.apply(
        c.AckMaterialized(
            request_id="a1",
            now=at(100),
            seq=sim.state.outbox_last_seq,
            finished_run_retention_seconds=10.0,
        )
    )
    assert ack.value == 2 and sim.state.run("d", run_id(day, "manual")) is None
    again = c.RunDecision("d", day, day, day, RunType.MANUAL, run_id="manual__again")
    refused = sim.apply(c.CreateRuns(request_id="m2", now=at(200), runs=(again,)))
    assert refused.value[0].reason == r.RUN_EXISTS
    # an hour later the slot is forgotten (the DB, which the API asks first, holds it)
    sim.apply(c.SetPaused(request_id="p", now=at(3700), dag_id="d", paused=True))  # a row
    sim.apply(c.AckMaterialized(request_id="a3", now=at(100 + 3601), seq=sim.state.outbox_last_seq))
    late = sim.apply(c.CreateRuns(request_id="m3", now=at(3800), runs=(again,)))
    assert late.ok
    assert sim.state.digest() == sim.state.recompute_digest()


def test_canonical_text_is_the_same_walked_or_recursed_and_any_depth_works() -> None:
    values = [{"b": [1, {"c": None}], "a": (True, 2.5, "x")}, _deep(20), [[[[]]]], {}]
    for value in values:
        assert dg.canonical(value) == dg._canonical_walk(value)
    assert dg.canonical(_deep(5_000)).count("{") == 5_001  # no RecursionError


def test_only_the_lease_holder_may_complete_or_log() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    sim.create("d")
    (grant,) = sim.lease(worker="w1")
    key, token = grant.lease.key, grant.lease.token
    forged = sim.apply(
        c.CompleteAttempt(
            request_id=sim.rid(), now=T0, key=key, token=token, success=True, worker_id="intruder"
        )
    )
    assert forged.reason == r.WRONG_WORKER
    logs = sim.apply(
        c.AppendLogs(
            request_id=sim.rid(),
            now=T0,
            key=key,
            token=token,
            chunks=(c.LogChunk("stdout", "x"),),
            worker_id="intruder",
        )
    )
    assert logs.reason == r.WRONG_WORKER
    assert sim.ti("a").state is TaskState.RUNNING
    done = sim.apply(
        c.CompleteAttempt(
            request_id=sim.rid(), now=T0, key=key, token=token, success=True, worker_id="w1"
        )
    )
    assert done.ok and sim.ti("a").state is TaskState.SUCCESS


def test_a_task_cleared_while_running_is_not_leased_again_before_its_lease_ends() -> None:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b")))
    sim.create("d")
    grants = {g.lease.key.task_id: g for g in sim.lease(worker="w1", n=2, ttl=30.0)}
    clear = c.ClearTasks(
        request_id=sim.rid(), now=at(5), dag_id="d", run_id=run_id(), task_ids=("a",)
    )
    assert sim.apply(clear).ok
    assert sim.lease(worker="w2", n=5, now=at(10)) == []  # a's old lease runs to at(30)
    assert sim.ti("a").state is TaskState.QUEUED
    mark = c.MarkTasks(
        request_id=sim.rid(),
        now=at(11),
        dag_id="d",
        run_id=run_id(),
        task_ids=("b",),
        state=TaskState.FAILED,
    )
    assert sim.apply(mark).ok
    restored = SchedulerState.restore(pickle.loads(pickle.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()
    (again,) = sim.lease(worker="w2", n=5, now=at(30))
    assert again.lease.key.task_id == "a" and again.lease.token > grants["a"].lease.token
    # b was marked while it ran: a clear right after must wait for b's old lease as well
    clear_b = c.ClearTasks(
        request_id=sim.rid(), now=at(31), dag_id="d", run_id=run_id(), task_ids=("b",)
    )
    assert sim.apply(clear_b).ok
    assert [g.lease.key.task_id for g in sim.lease(worker="w2", n=5, now=at(31))] == ["b"]
    assert sim.state.digest() == sim.state.recompute_digest()


def test_a_lease_stamped_by_a_node_whose_clock_is_behind_still_runs_its_full_ttl() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")), now=at(100))  # the leader's clock: at(100)
    sim.create("d", now=at(100))
    (grant,) = sim.lease(worker="w1", now=at(40), ttl=30.0)  # a follower 60 s behind
    assert grant.lease.expires_at == at(130)  # not at(70): the state's clock never goes back
    expire = c.ExpireLeases(
        request_id=sim.rid(), now=at(101), leases=(c.LeaseRef(grant.lease.key, 1 << 40),)
    )
    sim.apply(expire)
    assert sim.state.expired_leases(at(101)) == []


def test_texts_a_task_printed_are_sanitized_not_refused_as_older_releases_sent_them() -> None:
    """An older release put NUL into log chunks and outcome messages; replaying its log must
    give the same outcome (the attempt completes), with texts every DB accepts."""
    sim = Sim()
    sim.register(dag("d", task("a")))
    sim.create("d")
    (grant,) = sim.lease()
    assert sim.append_logs(grant, ("stdout", "bin\x00ary \udc80")).ok
    done = sim.complete(grant, success=True, message="exit\x00 " + "m" * 10_000)
    assert done.ok and sim.ti("a").state is TaskState.SUCCESS
    [log_row] = sim.outbox("task_log")
    assert log_row["text"] == "bin\ufffdary \ufffd"
    assert "\x00" not in sim.ti("a").message and len(sim.ti("a").message) <= 4096


def test_one_bad_run_decision_is_refused_alone() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")), dag("e", task("a")))
    early = datetime(1899, 12, 31, tzinfo=UTC)  # a DAG starting 1900-01-01: interval before
    bad = c.RunDecision("d", T0, T0, T0, RunType.MANUAL, conf={"x": _deep(40)})
    first = c.RunDecision("d", datetime(1900, 1, 1, tzinfo=UTC), early, early)
    good = c.RunDecision("e", T0, T0 - timedelta(days=1), T0)
    result = sim.apply(c.CreateRuns(request_id="r", now=T0, runs=(bad, first, good)))
    assert [item.reason for item in result.value] == [r.INVALID, "", ""]
    assert "nested deeper" in result.value[0].value


def test_a_barrier_takes_no_place_in_the_request_id_memory() -> None:
    sim = Sim()
    before = len(sim.state._dedup)
    for i in range(3):
        assert sim.apply(c.Batch(request_id=f"barrier-{i}", now=T0, commands=())).ok
    assert len(sim.state._dedup) == before


def test_a_malformed_value_is_refused_not_raised() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    weird = c.AppendLogs(
        request_id="w",
        now=T0,
        key=TaskKey("d", "r", "a"),
        token=1,
        chunks=(c.LogChunk(["x"], "t"),),  # type: ignore[arg-type]
    )
    assert sim.apply(weird).reason == r.INVALID
    from dataclasses import replace as _replace

    spec = dag("z", task("a"))
    broken = _replace(spec, tasks=(_replace(spec.tasks[0], kind=["bash"]),))  # type: ignore[arg-type]
    result = sim.apply(c.RegisterDags(request_id="z", now=T0, specs=(broken,)))
    assert result.value[0].reason == r.INVALID and sim.state.halted is None
