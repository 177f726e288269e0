"""Pipelined decisions (issue #11): several proposals in flight, settled in order; a failed one
is retried once, with the same request id, before anything after it; the leader never proposes
a decision again while an earlier proposal of it is in flight.

A one-replica "cluster" stands in for pysyncobj (``leader_fakes.OneReplica``): ``submit`` queues
a command, the test decides when each one commits (applied to a real ``SchedulerState``) or
fails, and in which order the callbacks come.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from leader_fakes import OneReplica, create_runs, leader_loop, proposer

from raftsched.cluster.leader import LeaderLoop
from raftsched.cluster.leader_commands import InFlightDecisions
from raftsched.cluster.proposer import Pipeline
from raftsched.core import commands as c
from raftsched.core.model import DagSpec, Schedule, ScheduleKind, TaskKey, TaskSpec, TaskState
from raftsched.core.results import Result
from raftsched.raft.outcomes import FailReason

NOW = datetime(2024, 5, 1, 12, 30, tzinfo=UTC)


def noop(request_id: str) -> c.Command:
    return c.Batch(request_id=request_id, now=NOW, commands=())


def recorder() -> tuple[list[tuple[str, bool]], Callable[[c.Command], Callable[..., None]]]:
    done: list[tuple[str, bool]] = []

    def on_done(command: c.Command) -> Callable[..., None]:
        return lambda _result, ok: done.append((command.request_id, ok))

    return done, on_done


# -- Pipeline ------------------------------------------------------------------------------


def test_several_in_flight_and_settled_in_submission_order() -> None:
    node = OneReplica()
    wakes: list[int] = []
    pipeline = Pipeline(proposer(node), max_in_flight=4, on_callback=lambda: wakes.append(1))
    done, on_done = recorder()
    commands = [noop(f"r{i}") for i in range(3)]
    for command in commands:
        pipeline.submit(command, on_done(command))
    assert [x.request_id for x in node.submitted] == ["r0", "r1", "r2"]  # none waited
    assert pipeline.in_flight == 3
    node.answer(2)  # the last one commits first
    pipeline.poll()
    assert done == []  # r0 is not settled yet: nothing after it is reported
    node.answer(0)
    pipeline.poll()
    assert done == [("r0", True)]
    node.answer(0)
    pipeline.poll()
    assert done == [("r0", True), ("r1", True), ("r2", True)]
    assert pipeline.in_flight == 0 and len(wakes) == 3 and pipeline.retried == 0


def test_submit_settles_the_oldest_when_the_pipeline_is_full() -> None:
    node = OneReplica()
    pipeline = Pipeline(proposer(node, commit_timeout=0.05), max_in_flight=2)
    done, on_done = recorder()
    for i in range(2):
        pipeline.submit(noop(f"r{i}"), on_done(noop(f"r{i}")))
    node.answer(0)
    third = noop("r2")
    pipeline.submit(third, on_done(third))  # r0 settles to make room
    assert done == [("r0", True)] and pipeline.in_flight == 2


def test_a_failed_proposal_is_retried_once_with_its_request_id_before_later_ones() -> None:
    node = OneReplica()
    pipeline = Pipeline(proposer(node), max_in_flight=4)
    done, on_done = recorder()
    first, second = noop("r0"), noop("r1")
    pipeline.submit(first, on_done(first))
    pipeline.submit(second, on_done(second))
    node.answer(0, FailReason.QUEUE_FULL)  # r0 refused at once
    node.answer(0)  # r1 commits
    # poll retries r0 (same command, same request id) and waits for it: answer from the
    # "tick thread" once it is resubmitted.
    retried = _answer_when_submitted(node, count=3)
    pipeline.poll()
    retried.join(5)
    assert [x.request_id for x in node.submitted] == ["r0", "r1", "r0"]
    assert node.submitted[2] is first
    assert done == [("r0", True), ("r1", True)]  # still in submission order
    assert pipeline.retried == 1 and not pipeline.failed


def test_a_proposal_failing_twice_fails_the_pipeline_and_later_ones_keep_their_outcome() -> None:
    node = OneReplica()
    pipeline = Pipeline(proposer(node), max_in_flight=4)
    done, on_done = recorder()
    commands = [noop(f"r{i}") for i in range(3)]
    for command in commands:
        pipeline.submit(command, on_done(command))
    node.answer(0, FailReason.QUEUE_FULL)
    node.answer(0)  # r1 commits
    node.answer(0, FailReason.QUEUE_FULL)  # r2 fails: not retried once the pipeline failed
    retried = _answer_when_submitted(node, count=4, outcome=FailReason.QUEUE_FULL)
    pipeline.poll()
    retried.join(5)
    assert [x.request_id for x in node.submitted] == ["r0", "r1", "r2", "r0"]  # r0 once more
    assert done == [("r0", False), ("r1", True), ("r2", False)]
    assert pipeline.failed and pipeline.retried == 1
    late = noop("r3")
    pipeline.submit(late, on_done(late))  # nothing goes out after a failure...
    assert done[-1] == ("r3", False) and len(node.submitted) == 4
    pipeline.reset()  # ...until the owner starts again with nothing in flight
    again = noop("r4")
    pipeline.submit(again, on_done(again))
    assert node.submitted[-1] is again


def test_a_timed_out_proposal_is_retried_once_and_a_late_success_counts() -> None:
    node = OneReplica()
    pipeline = Pipeline(proposer(node, commit_timeout=0.05), max_in_flight=4)
    done, on_done = recorder()
    first = noop("r0")
    pipeline.submit(first, on_done(first))
    original = node.pending[0][1]
    retried = _answer_when_submitted(node, count=2, then=lambda: original(Result(True), 0))
    pipeline.drain()  # times out, resubmits once; the first attempt's late success arrives
    retried.join(5)
    assert done == [("r0", True)] and pipeline.retried == 1
    assert [x.request_id for x in node.submitted] == ["r0", "r0"]


def test_request_denied_fails_at_once_without_a_retry() -> None:
    node = OneReplica()
    pipeline = Pipeline(proposer(node), max_in_flight=4)
    done, on_done = recorder()
    first = noop("r0")
    pipeline.submit(first, on_done(first))
    node.answer(0, FailReason.REQUEST_DENIED)
    pipeline.poll()
    assert done == [("r0", False)] and pipeline.failed and len(node.submitted) == 1


def test_a_node_that_stops_leading_does_not_wait_out_the_commit_timeout() -> None:
    import threading

    node = OneReplica()
    leading = threading.Event()
    leading.set()
    pipeline = Pipeline(proposer(node, commit_timeout=120), max_in_flight=4,
                        should_continue=leading.is_set)  # fmt: skip
    done, on_done = recorder()
    command = noop("r0")
    pipeline.submit(command, on_done(command))  # never answered
    drained = threading.Thread(target=pipeline.drain, daemon=True)
    drained.start()
    leading.clear()  # deposed: the wait ends, nothing is retried
    drained.join(30)  # bounded; the commit timeout is 120 s
    assert not drained.is_alive()
    assert done == [("r0", False)] and pipeline.failed and len(node.submitted) == 1


def test_abandon_forgets_what_is_in_flight_without_callbacks() -> None:
    node = OneReplica()
    pipeline = Pipeline(proposer(node), max_in_flight=4)
    done, on_done = recorder()
    command = noop("r0")
    pipeline.submit(command, on_done(command))
    assert pipeline.abandon() == [command]
    node.answer(0)
    pipeline.drain()
    assert done == [] and pipeline.in_flight == 0


def _answer_when_submitted(
    node: OneReplica,
    *,
    count: int,
    outcome: int = FailReason.SUCCESS,
    then: Callable[[], None] | None = None,
) -> Any:
    """A thread that answers the pending command once ``count`` commands were submitted (the
    retry is submitted and waited for on the caller's thread)."""
    import threading
    import time

    def run() -> None:
        deadline = time.monotonic() + 5
        while len(node.submitted) < count and time.monotonic() < deadline:
            time.sleep(0.005)
        if then is not None:
            then()
        elif node.pending:
            node.answer(len(node.pending) - 1, outcome)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- InFlightDecisions and the leader's tick ------------------------------------------------


def hourly(dag_id: str) -> DagSpec:
    return DagSpec(
        dag_id=dag_id,
        fileloc=f"/dags/{dag_id}.py",
        schedule=Schedule(ScheduleKind.CRON, cron="0 * * * *", display="0 * * * *"),
        start_date=NOW - timedelta(hours=3),
        catchup=True,
        max_active_runs=1000,
        tasks=(TaskSpec(task_id="t", kind="bash", command="true"),),
    )


def test_in_flight_decisions_follow_a_batch_and_release_it() -> None:
    in_flight = InFlightDecisions()
    key = TaskKey("d", "run", "t")
    queue = c.QueueTasks(
        request_id="q",
        now=NOW,
        items=(c.QueueDecision(key, TaskState.UP_FOR_RETRY, 1),),
    )
    create = c.CreateRuns(request_id="c", now=NOW, runs=(c.RunDecision("d", NOW, NOW, NOW),))
    expire = c.ExpireLeases(request_id="e", now=NOW, leases=(c.LeaseRef(key, 7),))
    batch = c.Batch(request_id="b", now=NOW, commands=(create, queue, expire))
    in_flight.add(batch)
    assert in_flight.dags == {"d"} and len(in_flight) == 3
    assert in_flight.fresh_queue(queue.items) == []
    assert in_flight.fresh_expiry(expire.leases) == []
    in_flight.release(batch)
    assert len(in_flight) == 0 and in_flight.fresh_queue(queue.items) == list(queue.items)


@pytest.fixture
def loop(tmp_path: Path) -> tuple[LeaderLoop, OneReplica, list[datetime]]:
    node = OneReplica()
    node.apply(c.RegisterDags(request_id="reg", now=NOW, specs=(hourly("a"), hourly("b"))))
    clock = [NOW]
    return leader_loop(node, tmp_path, clock), node, clock


def created(
    node: OneReplica, commands: list[c.Command] | None = None
) -> list[tuple[str, datetime]]:
    """The run decisions (dag_id, logical_date) of every submitted command, or of ``commands``."""
    creates = create_runs(node.submitted if commands is None else commands)
    return [(d.dag_id, d.logical_date) for sub in creates for d in sub.runs]


def test_the_leader_never_proposes_a_run_again_while_it_is_in_flight(
    loop: tuple[LeaderLoop, OneReplica, list[datetime]],
) -> None:
    leader, node, clock = loop
    leader._tick()
    first = created(node)
    assert {dag for dag, _ in first} == {"a", "b"} and len(first) == len(set(first))
    for _ in range(3):  # nothing committed yet: later ticks decide nothing about a or b
        leader._tick()
    assert created(node) == first and len(node.pending) == 1
    assert leader._in_flight.dags == {"a", "b"}
    node.answer(0)  # commits; the next tick settles it and marks the DueIndex
    leader._tick()
    assert created(node) == first and leader._in_flight.dags == set()
    clock[0] = NOW + timedelta(hours=1)  # the next slot of each DAG is due
    leader._tick()
    later = created(node)[len(first) :]
    assert sorted(dag for dag, _ in later) == ["a", "b"]  # one new slot each, after the others
    for dag, slot in later:
        assert slot > max(s for d, s in first if d == dag)


def test_a_run_whose_proposal_failed_twice_is_decided_again(
    loop: tuple[LeaderLoop, OneReplica, list[datetime]],
) -> None:
    leader, node, _clock = loop
    leader._tick()
    first = node.submitted[0]
    node.answer(0, FailReason.QUEUE_FULL)  # refused; the pipeline retries it once...
    retry = _answer_when_submitted(node, count=2, outcome=FailReason.QUEUE_FULL)
    leader._tick()  # ...which fails too: its decisions are released and decided again anew
    retry.join(5)
    assert node.submitted[1] is first  # the retry: the same command, the same request id
    assert len(node.submitted) == 3 and node.submitted[2].request_id != first.request_id
    assert created(node, node.submitted[2:]) == created(node, [first])  # the same runs
    node.answer(0)
    leader._tick()
    assert leader._in_flight.dags == set()
    assert node.state.active_run_count("a") > 0 and node.state.active_run_count("b") > 0


def test_in_flight_decisions_follow_deadline_alerts() -> None:
    miss_deadlines = getattr(c, "MissDeadlines", None)
    if miss_deadlines is None:
        pytest.skip("no MissDeadlines in this release")
    in_flight = InFlightDecisions()
    alert = miss_deadlines(request_id="m", now=NOW, runs=(("d", "run"),))
    in_flight.add(alert)
    assert in_flight.fresh_alerts([("d", "run"), ("d", "other")]) == [("d", "other")]
    in_flight.release(alert)
    assert in_flight.fresh_alerts([("d", "run")]) == [("d", "run")]


def test_the_leader_times_out_a_run_once_and_not_again_while_in_flight(tmp_path: Path) -> None:
    from dataclasses import replace

    from raftsched.core.run_timeout import TimeoutRuns

    node = OneReplica()
    spec = replace(hourly("t"), dagrun_timeout_seconds=60.0, catchup=False)
    node.apply(c.RegisterDags(request_id="reg", now=NOW, specs=(spec,)))
    clock = [NOW]
    leader = leader_loop(node, tmp_path, clock)
    leader._tick()
    node.answer(0)  # the scheduled run is created
    leader._tick()
    (run,) = node.state.runs("t")

    def timeouts() -> list[TimeoutRuns]:
        return [
            sub
            for command in node.submitted
            for sub in (command.commands if isinstance(command, c.Batch) else (command,))
            if isinstance(sub, TimeoutRuns)
        ]

    assert timeouts() == []
    clock[0] = NOW + timedelta(seconds=61)
    leader._walked_at.clear()  # the walk's once-a-second pacing: a test ticks faster
    leader._tick()
    assert [t.runs for t in timeouts()] == [(("t", run.run_id),)]
    leader._walked_at.clear()
    leader._tick()  # in flight: not proposed again
    assert len(timeouts()) == 1 and leader._in_flight.timing_out == {("t", run.run_id)}
    while node.pending:
        node.answer(0)
    leader._tick()
    assert node.state.run("t", run.run_id).state == "failed"
    assert leader._in_flight.timing_out == set()
