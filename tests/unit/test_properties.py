"""Property tests: random command sequences, including duplicated, reordered and stale
proposals, keep every invariant of docs/architecture.md §4 that the state machine owns."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_state_harness import T0, Sim, dag, task

from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core.model import FINISHED_TASK_STATES, RunType, TaskState
from raftsched.core.results import Result
from raftsched.core.state import SchedulerState

DAGS = (
    dag(
        "d1",
        task("a", retries=1, retry_delay_seconds=5),
        task("b", "a", retries=2, retry_delay_seconds=3, retry_exponential_backoff=True),
        task("c", "a", trigger_rule="one_failed"),
        task("z", "b", "c", trigger_rule="none_failed", priority_weight=4),
        max_active_runs=2,
    ),
    dag(
        "d2",
        task("x"),
        task("y", "x", trigger_rule="all_done", retries=1, retry_delay_seconds=1),
        max_active_tasks=1,
    ),
)

KINDS = (
    "tick",
    "create",
    "lease",
    "complete",
    "heartbeat",
    "expire",
    "release",
    "logs",
    "retry",
    "clear",
    "mark",
    "ack",
    "pause",
    "dup",
    "propose",
    "deliver",
)
OPS = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 40), st.integers(0, 40), st.booleans()),
    min_size=1,
    max_size=45,
)


class Driver(Sim):
    def __init__(self) -> None:
        super().__init__()
        self.results: list[Result] = []
        self.max_token: dict = {}
        self.grants: list = []
        self.stash: list[c.Command] = []
        self.now = T0

    def apply(self, command: c.Command) -> Result:
        result = super().apply(command)
        assert result.reason != r.INTERNAL_ERROR, result
        self.results.append(result)
        for leased in _grants_of(result, fresh_only=True):
            key = leased.lease.key
            assert leased.lease.token > self.max_token.get(key, 0)  # tokens strictly increase
            self.max_token[key] = leased.lease.token
            self.grants.append(leased)
        return result

    def step(self, kind: str, a: int, b: int, flag: bool) -> None:
        now, rid = self.now, self.rid()
        pick = self.grants[a % len(self.grants)] if self.grants else None
        ref = c.LeaseRef(pick.lease.key, pick.lease.token) if pick else None
        runs = list(self.state.runs())
        if kind == "tick":
            self.now += timedelta(seconds=a)
        elif kind == "create":
            spec = DAGS[a % 2]
            logical = T0 + timedelta(days=b % 5)
            run_type = RunType.MANUAL if flag else RunType.SCHEDULED
            decision = c.RunDecision(spec.dag_id, logical, logical, logical, run_type)
            self.apply(c.CreateRuns(request_id=rid, now=now, runs=(decision,)))
        elif kind == "lease":
            self.lease(worker=f"w{b % 2}", n=a % 3 + 1, now=now, ttl=20)
        elif kind == "complete" and pick:
            self.complete(pick, success=flag, now=now, exit_code=b)
        elif kind == "heartbeat" and ref and pick:
            worker = pick.lease.worker_id if flag else "intruder"
            self.apply(c.HeartbeatLeases(request_id=rid, now=now, worker_id=worker, leases=(ref,)))
        elif kind == "expire":
            refs = tuple(self.state.expired_leases(now)) if flag or not ref else (ref,)
            self.apply(c.ExpireLeases(request_id=rid, now=now, leases=refs))
        elif kind == "release" and ref and pick:
            cmd = c.ReleaseLeases(
                request_id=rid, now=now, worker_id=pick.lease.worker_id, leases=(ref,)
            )
            self.apply(cmd)
        elif kind == "logs" and ref:
            chunks = (c.LogChunk("stdout", f"line {b}\n"),)
            self.apply(
                c.AppendLogs(request_id=rid, now=now, key=ref.key, token=ref.token, chunks=chunks)
            )
        elif kind == "retry":
            items = tuple(self.state.ready_to_queue(now))
            if flag:
                items += tuple(
                    c.QueueDecision(i.key, i.expected_state, i.try_number + 1) for i in items
                )
            self.apply(c.QueueTasks(request_id=rid, now=now, items=items))
        elif kind in ("clear", "mark") and runs:
            run = runs[a % len(runs)]
            spec = self.state.run_spec(run.dag_id, run.run_id)
            assert spec is not None
            task_ids = (spec.tasks[b % len(spec.tasks)].task_id,)
            if kind == "clear":
                cmd = c.ClearTasks(
                    request_id=rid,
                    now=now,
                    dag_id=run.dag_id,
                    run_id=run.run_id,
                    task_ids=task_ids,
                    include_downstream=flag,
                )
            else:
                state = TaskState.SUCCESS if flag else TaskState.FAILED
                cmd = c.MarkTasks(
                    request_id=rid,
                    now=now,
                    dag_id=run.dag_id,
                    run_id=run.run_id,
                    task_ids=task_ids,
                    state=state,
                )
            self.apply(cmd)
        elif kind == "ack":
            seq = (
                self.state.outbox_acked_seq + a % (self.state.outbox_size + 3) - (1 if flag else 0)
            )
            self.apply(
                c.AckMaterialized(
                    request_id=rid, now=now, seq=seq, finished_run_retention_seconds=b
                )
            )
        elif kind == "pause":
            self.apply(c.SetPaused(request_id=rid, now=now, dag_id=DAGS[a % 2].dag_id, paused=flag))
        elif kind == "dup" and self.log:
            self.apply(self.log[a % len(self.log)][0])  # the same request id again
        elif kind == "propose":  # computed now, delivered later (maybe by a deposed leader)
            expired = tuple(self.state.expired_leases(now))
            due = tuple(self.state.ready_to_queue(now))
            self.stash.append(c.ExpireLeases(request_id=rid + "e", now=now, leases=expired))
            self.stash.append(c.QueueTasks(request_id=rid + "q", now=now, items=due))
        elif kind == "deliver" and self.stash:
            self.apply(self.stash.pop(a % len(self.stash)))

    def check(self) -> None:
        state = self.state
        assert state.digest() == state.recompute_digest()
        slots = [(run.dag_id, run.logical_date) for run in state.runs()]
        assert len(slots) == len(set(slots)), "two runs for one (dag_id, logical_date)"
        leases = state.leases()
        assert len({lease.key for lease in leases}) == len(leases), "two live leases for a task"
        for lease in leases:
            assert lease.token == self.max_token[lease.key]  # the newest grant is the live one
        for run in state.runs():
            tis = state.task_instances(run.dag_id, run.run_id)
            for ti in tis:
                assert (ti.state is TaskState.RUNNING) == (ti.lease is not None)
                assert ti.try_number <= ti.max_tries or ti.state in FINISHED_TASK_STATES
            if run.state in ("success", "failed"):
                assert all(ti.state in FINISHED_TASK_STATES for ti in tis)
        acked, last = state.outbox_acked_seq, state.outbox_last_seq
        seqs = [entry.seq for entry in state.outbox_after(acked, 10**9)]
        assert seqs == list(range(acked + 1, last + 1)), "outbox seqs must be gapless"
        for spec in DAGS:
            running = sum(1 for lease in leases if lease.key.dag_id == spec.dag_id)
            assert running == state.running_task_count(spec.dag_id)
            active = [run for run in state.runs(spec.dag_id) if run.state in ("queued", "running")]
            assert len(active) == state.active_run_count(spec.dag_id)


def _grants_of(result: Result, fresh_only: bool) -> list:
    """Lease grants in a result (also inside a Batch's); a duplicate's were granted before."""
    if (fresh_only and result.duplicate) or not isinstance(result.value, tuple):
        return []
    out = [v for v in result.value if isinstance(v, r.LeaseGrant)]
    for v in result.value:
        if isinstance(v, Result):
            out.extend(_grants_of(v, fresh_only))
    return out


def drive(ops: list[tuple[str, int, int, bool]]) -> Driver:
    driver = Driver()
    driver.register(*DAGS)
    for op in ops:
        driver.step(*op)
        driver.check()
    return driver


@given(OPS)
def test_invariants_hold_under_random_commands(ops: list) -> None:
    drive(ops)


@given(OPS)
def test_replaying_the_log_gives_identical_state(ops: list) -> None:
    driver = drive(ops)
    replica = SchedulerState()
    results = [replica.apply(cmd, log_index=index) for cmd, index in driver.log]
    assert results == driver.results
    assert replica.snapshot() == driver.state.snapshot()
    assert replica.digest() == driver.state.digest()


@given(OPS, st.integers(min_value=0))
def test_snapshot_restore_continue_equals_continuing(ops: list, cut: int) -> None:
    driver = drive(ops)
    cut %= len(driver.log) + 1
    early = SchedulerState()
    for cmd, index in driver.log[:cut]:
        early.apply(cmd, log_index=index)
    restored = SchedulerState.restore(json.loads(json.dumps(early.snapshot())))
    assert restored.digest() == early.digest()
    results = [restored.apply(cmd, log_index=index) for cmd, index in driver.log[cut:]]
    assert results == driver.results[cut:]
    assert restored.snapshot() == driver.state.snapshot()
    assert restored.digest() == driver.state.digest()


@pytest.mark.parametrize("seed", range(25))
def test_seeded_random_walks(seed: int) -> None:
    """Long uniform walks complement hypothesis' search (which favours small values)."""
    rng = random.Random(seed)
    ops = [
        (rng.choice(KINDS), rng.randint(0, 40), rng.randint(0, 40), rng.random() < 0.5)
        for _ in range(80)
    ]
    driver = drive(ops)
    cut = rng.randint(0, len(driver.log))
    early = SchedulerState()
    for cmd, index in driver.log[:cut]:
        early.apply(cmd, log_index=index)
    restored = SchedulerState.restore(json.loads(json.dumps(early.snapshot())))
    results = [restored.apply(cmd, log_index=index) for cmd, index in driver.log[cut:]]
    assert results == driver.results[cut:]
    assert restored.snapshot() == driver.state.snapshot()
