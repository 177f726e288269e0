"""The DB and the log agree, or the leader says so and stops (issue #10 part 2).

The materializer compares the DB watermark with the state's outbox on becoming leader:
watermark > last_seq (journals behind the DB) and watermark < acked_seq (the DB lost
acknowledged entries) both stop materializing and scheduling, with a message naming the
repair. Before this, the first acknowledged entries it never wrote (silent loss) and the
second stopped on OutboxGap forever without saying what to do.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_cluster_support import FakeState, cluster_settings, wait_for

from raftsched.cluster.leader import LeaderLoop, LoopSettings
from raftsched.cluster.materializer_driver import MaterializerDriver
from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.proposer import Proposer, new_request_id
from raftsched.core.commands import (
    AckMaterialized,
    Batch,
    CreateRuns,
    LeaseTasks,
    SetPaused,
)
from raftsched.core.model import OutboxEntry
from raftsched.core.results import Result
from raftsched.errors import RaftschedError
from raftsched.raft.outcomes import FailReason

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _State:
    def __init__(self, last_seq: int, acked_seq: int) -> None:
        self.outbox_last_seq = last_seq
        self.outbox_acked_seq = acked_seq

    def outbox_after(self, seq: int, limit: int) -> list[OutboxEntry]:
        first = max(seq, self.outbox_acked_seq) + 1
        return [
            OutboxEntry(seq=s, kind="dag", data={}) for s in range(first, self.outbox_last_seq + 1)
        ][:limit]


class _Node:
    def __init__(self, state: _State) -> None:
        self.state = state
        self.is_leader = True
        self.term = 3

    def add_apply_listener(self, fn: Any) -> None:
        pass

    def remove_apply_listener(self, fn: Any) -> None:
        pass

    def add_role_listener(self, fn: Any) -> None:
        pass

    def read(self, fn: Any) -> Any:
        return fn(self.state)


class _Proposer:
    commit_timeout = 1.0

    def __init__(self) -> None:
        self.proposed: list[Any] = []

    def make(self, cls: Any, **kwargs: Any) -> Any:
        return cls(request_id=new_request_id(), now=NOW, **kwargs)

    def propose(self, command: Any, **_kw: Any) -> Result:
        self.proposed.append(command)
        return Result(ok=True)


class _Sink:
    def __init__(self, watermark: int) -> None:
        self._watermark = watermark
        self.written: list[int] = []

    def watermark(self) -> int:
        return self._watermark

    def write(self, entries: list[OutboxEntry]) -> int:
        seqs = [e.seq for e in entries if e.seq > self._watermark]
        if seqs and seqs[0] != self._watermark + 1:
            raise RaftschedError(f"gap: {seqs[0]} after {self._watermark}")  # like OutboxGap
        self.written += seqs
        self._watermark = max([self._watermark, *seqs])
        return self._watermark

    def quarantined_count(self) -> int:
        return 0


def _drive(
    watermark: int, last_seq: int, acked: int
) -> tuple[MaterializerDriver, _Proposer, _Sink]:
    node, proposer, sink = _Node(_State(last_seq, acked)), _Proposer(), _Sink(watermark)
    driver = MaterializerDriver(node, proposer, sink)  # type: ignore[arg-type]
    driver.start()
    try:
        wait_for(
            lambda: driver.mismatch or (driver.hold_reason() is None and driver.db_watermark),
            timeout=10,
            what="the materializer's first round",
        )
        threading.Event().wait(0.3)  # let a (wrong) ack go out, if the code would send one
    finally:
        driver.stop()
    return driver, proposer, sink


def _acks(proposer: _Proposer) -> list[int]:
    return [c.seq for c in proposer.proposed if isinstance(c, AckMaterialized)]


def test_journal_behind_the_db_is_refused_not_acknowledged() -> None:
    # A new history (journals lost) whose outbox ends at 4; the DB already holds up to 10.
    driver, proposer, sink = _drive(watermark=10, last_seq=4, acked=0)
    assert _acks(proposer) == []  # today's code acked min(10, 4) = 4 without writing
    assert sink.written == []
    assert driver.mismatch and "journals are behind the DB" in driver.mismatch
    assert "raftsched cluster rebuild --from-db" in driver.mismatch
    assert driver.hold_reason() == driver.mismatch
    run = CreateRuns(request_id="r", now=NOW, runs=())
    lease = LeaseTasks(request_id="l", now=NOW, worker_id="w", max_tasks=1, lease_ttl_seconds=30)
    assert driver.refuses(run) and driver.refuses(lease)
    assert driver.refuses(Batch(request_id="b", now=NOW, commands=(run,)))
    assert driver.refuses(SetPaused(request_id="p", now=NOW, dag_id="d", paused=True)) is None


def test_db_behind_the_acknowledged_entries_is_refused() -> None:
    # The cluster acked up to 5 (entries gone from the outbox) but the DB is back at 2.
    driver, proposer, sink = _drive(watermark=2, last_seq=8, acked=5)
    assert _acks(proposer) == [] and sink.written == []
    assert driver.mismatch and "the DB lost committed writes" in driver.mismatch
    assert "at least 5" in driver.mismatch and "rebuild --from-db" in driver.mismatch
    assert driver.hold_reason() is not None


def test_agreement_writes_then_acknowledges() -> None:
    driver, proposer, sink = _drive(watermark=3, last_seq=6, acked=3)
    wait_for(lambda: _acks(proposer), timeout=5, what="an ack")
    assert driver.mismatch is None and driver.hold_reason() is None
    assert sink.written == [4, 5, 6] and _acks(proposer) == [6]
    assert isinstance(proposer.proposed[0], Batch)  # the barrier comes before the check


class _DeposedLeaderProposer(_Proposer):
    """The barrier commits the deposed leader's last ack (5): its DB write (3 -> 5) landed
    just before, after the new leader could have read the watermark."""

    def __init__(self, state: _State, sink: _Sink) -> None:
        super().__init__()
        self._state, self._sink = state, sink

    def propose(self, command: Any, **kw: Any) -> Result:
        if isinstance(command, Batch) and self._state.outbox_acked_seq < 5:
            self._sink._watermark = 5
            self._state.outbox_acked_seq = 5
        return super().propose(command, **kw)


def test_an_ack_the_barrier_commits_is_no_false_alarm() -> None:
    state, sink = _State(last_seq=8, acked_seq=3), _Sink(watermark=3)
    proposer = _DeposedLeaderProposer(state, sink)
    driver = MaterializerDriver(_Node(state), proposer, sink)  # type: ignore[arg-type]
    driver.start()
    try:
        wait_for(lambda: _acks(proposer), timeout=10, what="an ack")
    finally:
        driver.stop()
    # Read before the barrier, the watermark (3) was behind the acks (5): a CRITICAL
    # "the DB lost committed writes" and no scheduling until the next check.
    assert driver.mismatch is None
    assert sink.written == [6, 7, 8] and _acks(proposer) == [8]


def test_leader_loop_holds_while_told() -> None:
    node, proposer = _Node(_State(0, 0)), _Proposer()
    loop = LeaderLoop(node, proposer, LoopSettings(dags_folder=Path("/nonexistent"), parse=False))  # type: ignore[arg-type]
    loop.hold = lambda: "the DB and the log disagree"
    loop._tick()
    assert proposer.proposed == [] and loop.held == "the DB and the log disagree"


@pytest.fixture
def nodes(tmp_path: Path) -> Any:
    nodes = [SchedulerNode(s, state_factory=FakeState) for s in cluster_settings(tmp_path)]
    try:
        yield nodes
    finally:
        for node in nodes:
            node.close()


def _outcome(node: SchedulerNode, command: AckMaterialized, *, forward: bool) -> int:
    """pysyncobj's FailReason for one proposal: submit() here, or (``forward``) straight to
    the replicated method, so a follower forwards it to the leader without its own gate."""
    for _ in range(20):  # an election may interrupt a proposal: ask again
        done = threading.Event()
        got: list[int] = []

        def callback(_result: Any, reason: int, got: list[int] = got, done: Any = done) -> None:
            got.append(reason)
            done.set()

        if forward:
            node.raft._engine._apply_command(command, callback=callback)  # (past the gate here)
        else:
            node.submit(command, callback)
        done.wait(5.0)
        if got and got[0] in (FailReason.SUCCESS, FailReason.REQUEST_DENIED):
            return got[0]
        threading.Event().wait(0.2)
    raise AssertionError(f"no definite outcome for {command.request_id}")


def test_node_gate_refuses_commands_from_here_and_forwarded(nodes: list[SchedulerNode]) -> None:
    leader = wait_for(
        lambda: next((n for n in nodes if n.is_leader and n.quorum), None),
        timeout=20,
        what="a leader",
    )
    follower = next(n for n in nodes if n is not leader)
    for node in nodes:  # whichever node leads when the command arrives refuses it
        node.command_gate = lambda c: (
            "mismatch" if c is None or c.request_id.startswith("no-") else None
        )

    def ack(prefix: str) -> AckMaterialized:
        return AckMaterialized(request_id=prefix + new_request_id(), now=NOW, seq=1)

    assert _outcome(leader, ack("no-"), forward=False) == FailReason.REQUEST_DENIED
    assert _outcome(follower, ack("no-"), forward=True) == FailReason.REQUEST_DENIED
    assert _outcome(follower, ack("ok-"), forward=True) == FailReason.SUCCESS
    for node in nodes:
        node.command_gate = None
    assert _outcome(follower, ack("no-"), forward=True) == FailReason.SUCCESS
    with pytest.raises(RaftschedError, match="refused"):
        leader.command_gate = lambda c: "mismatch"
        Proposer(leader, commit_timeout=3.0).propose(ack("x-"), deadline=3.0)
