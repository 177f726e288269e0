"""A real 3-node pysyncobj cluster inside this process, on loopback, with a fake state."""

from __future__ import annotations

import gzip
import pickle
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_cluster_support import FakeState, cluster_settings, wait_for

from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.proposer import Proposer, new_request_id
from raftsched.core.commands import AckMaterialized
from raftsched.errors import CommitTimeout, NoQuorumError


def command(request_id: str | None = None) -> AckMaterialized:
    return AckMaterialized(request_id=request_id or new_request_id(), now=datetime.now(UTC), seq=1)


def leader_of(nodes: list[SchedulerNode]) -> SchedulerNode | None:
    leaders = [n for n in nodes if n.is_leader and n.quorum]
    return leaders[0] if len(leaders) == 1 else None


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[SchedulerNode]]:
    nodes = [SchedulerNode(s, state_factory=FakeState) for s in cluster_settings(tmp_path)]
    try:
        wait_for(lambda: leader_of(nodes), timeout=20, what="a leader")
        yield nodes
    finally:
        for node in nodes:
            node.close()


def applied_ids(node: SchedulerNode) -> list[str]:
    return node.read(lambda state: [rid for _, rid in state.applied])


def test_propose_returns_apply_result_with_log_index(cluster: list[SchedulerNode]) -> None:
    leader = wait_for(lambda: leader_of(cluster), timeout=10, what="a leader")
    result = Proposer(leader, commit_timeout=2.0).propose(command())
    assert result.ok and not result.duplicate
    assert isinstance(result.value, int) and result.value >= 2  # the entry's Raft log index
    assert leader.read(lambda state: state.applied_index) == result.value


def test_follower_can_propose(cluster: list[SchedulerNode]) -> None:
    leader = wait_for(lambda: leader_of(cluster), timeout=10, what="a leader")
    follower = next(n for n in cluster if n is not leader)
    result = Proposer(follower, commit_timeout=2.0).propose(command())
    assert result.ok


def test_retry_with_same_request_id_applies_once(cluster: list[SchedulerNode]) -> None:
    leader = wait_for(lambda: leader_of(cluster), timeout=10, what="a leader")
    follower = next(n for n in cluster if n is not leader)
    cmd = command()
    first = Proposer(leader, commit_timeout=2.0).propose(cmd)
    again = Proposer(follower, commit_timeout=2.0).propose(cmd)
    assert again.duplicate and again.value == first.value
    for node in cluster:
        wait_for(
            lambda node=node: (
                applied_ids(node).count(cmd.request_id) == 1
                and node.raft.last_applied >= leader.raft.commit_index
            ),
            timeout=10,
            what="every node applying the command",
        )
        assert applied_ids(node).count(cmd.request_id) == 1


def test_digests_agree_at_equal_index(cluster: list[SchedulerNode]) -> None:
    leader = wait_for(lambda: leader_of(cluster), timeout=10, what="a leader")
    proposer = Proposer(leader, commit_timeout=2.0)
    for _ in range(20):
        proposer.propose(command())
    target = leader.digest()
    for node in cluster:
        got = wait_for(
            lambda node=node: node.digest() if node.digest()[0] == target[0] else None,
            timeout=10,
            what="every node at the leader's digest index",
        )
        assert got == target


def test_snapshot_and_restart_from_journal(tmp_path: Path) -> None:
    settings = cluster_settings(tmp_path)
    nodes = [SchedulerNode(s, state_factory=FakeState) for s in settings]
    try:
        leader = wait_for(lambda: leader_of(nodes), timeout=20, what="a leader")
        proposer = Proposer(leader, commit_timeout=2.0)
        for _ in range(10):
            proposer.propose(command())
        victim = next(n for n in nodes if n is not leader)
        index = victim.settings.self_address
        wait_for(
            lambda: victim.digest()[0] == leader.digest()[0], timeout=10, what="victim caught up"
        )
        victim.raft.force_compaction()
        wait_for(victim.settings.dump_file.exists, timeout=10, what="a snapshot file")
        for _ in range(5):  # entries after the snapshot live in the journal only
            proposer.propose(command())
        wait_for(
            lambda: victim.digest()[0] == leader.digest()[0], timeout=10, what="victim caught up"
        )
        before = victim.digest()
        victim.close()
        nodes.remove(victim)
        restarted = SchedulerNode(
            next(s for s in settings if s.self_address == index), state_factory=FakeState
        )
        nodes.append(restarted)
        got = wait_for(
            lambda: restarted.digest() if restarted.digest()[0] >= before[0] else None,
            timeout=20,
            what="the restarted node replaying snapshot + journal",
        )
        assert got == before
        assert restarted.fatal_error is None
    finally:
        for node in nodes:
            node.close()


def test_no_quorum_raises_in_time(tmp_path: Path) -> None:
    settings = cluster_settings(tmp_path)
    lonely = SchedulerNode(settings[0], state_factory=FakeState)  # the others never start
    try:
        proposer = Proposer(lonely, commit_timeout=0.3, deadline=1.0)
        with pytest.raises((NoQuorumError, CommitTimeout)):
            proposer.propose(command())
        assert not lonely.is_leader
    finally:
        lonely.close()


class SlowSnapshotState(FakeState):
    """A state whose serialization takes a while, as a big one does (1 s per snapshot)."""

    def snapshot(self) -> dict[str, Any]:
        time.sleep(1.0)  # runs in the forked writer: the node goes on applying meanwhile
        return super().snapshot()


def test_snapshot_written_while_commands_apply_is_the_state_at_its_index(tmp_path: Path) -> None:
    nodes = [SchedulerNode(s, state_factory=SlowSnapshotState) for s in cluster_settings(tmp_path)]
    try:
        leader = wait_for(lambda: leader_of(nodes), timeout=20, what="a leader")
        victim = next(n for n in nodes if n is not leader)
        digests: dict[int, str] = {}  # log index -> the victim's digest after applying it
        victim.add_apply_listener(
            lambda index, _cmd, _res: digests.__setitem__(index, victim._state.digest())
        )
        proposer = Proposer(leader, commit_timeout=2.0)
        for _ in range(5):
            proposer.propose(command())
        stop = threading.Event()

        def keep_proposing() -> None:
            while not stop.is_set():
                proposer.propose(command())

        feeder = threading.Thread(target=keep_proposing, daemon=True)
        feeder.start()
        try:
            victim.raft.force_compaction()
            wait_for(victim.settings.dump_file.exists, timeout=10, what="a snapshot file")
            applied_when_written = victim.raft.last_applied
        finally:
            stop.set()
            feeder.join(timeout=10)
        with gzip.open(victim.settings.dump_file, "rb") as src:
            payload = pickle.load(src)
        index = payload["raft"][0][1]  # the last entry applied when the writer forked
        restored = FakeState()
        restored.restore(payload["state"])
        at_index = max(i for i in digests if i <= index)
        assert restored.digest() == digests[at_index]
        # the node applied on while the (slow) writer ran: the fork did not stop it
        assert applied_when_written > index
        # and a node restarted from that snapshot plus its journal agrees with the others
        wait_for(
            lambda: victim.digest()[0] == leader.digest()[0], timeout=10, what="victim caught up"
        )
        before = victim.digest()
        settings = victim.settings
        victim.close()
        nodes.remove(victim)
        restarted = SchedulerNode(settings, state_factory=SlowSnapshotState)
        nodes.append(restarted)
        got = wait_for(
            lambda: restarted.digest() if restarted.digest()[0] >= before[0] else None,
            timeout=20,
            what="the restarted node replaying snapshot + journal",
        )
        assert got == before
    finally:
        for node in nodes:
            node.close()


def test_restart_between_snapshot_and_compaction_keeps_the_entries_after_it(
    tmp_path: Path,
) -> None:
    """pysyncobj clears a journal that does not begin at the snapshot when it loads one, the
    acknowledged entries after the snapshot included; the node compacts it to the snapshot
    first. Here a journal that was never compacted (the node stopped after the snapshot file
    was renamed into place) is put back, and the node, alone, replays past the snapshot."""
    from raftsched.raft.journal import MAGIC, encode_record, entries_of

    settings = cluster_settings(tmp_path)
    nodes = [SchedulerNode(s, state_factory=FakeState) for s in settings]
    try:
        leader = wait_for(lambda: leader_of(nodes), timeout=20, what="a leader")
        proposer = Proposer(leader, commit_timeout=2.0)
        for _ in range(10):
            proposer.propose(command())
        victim = next(n for n in nodes if n is not leader)
        victim_settings = victim.settings
        wait_for(lambda: victim.digest()[0] == leader.digest()[0], timeout=10, what="catch-up")
        early = entries_of(str(victim_settings.journal_file))  # every entry so far
        victim.raft.force_compaction()
        wait_for(
            lambda: victim_settings.dump_file.exists() and len(victim.raft.journal) < 5,
            timeout=10,
            what="a snapshot and a compacted journal",
        )
        for _ in range(5):
            proposer.propose(command())
        wait_for(lambda: victim.digest()[0] == leader.digest()[0], timeout=10, what="catch-up")
        before = victim.digest()
        for node in nodes:
            node.close()
        nodes.clear()
        compacted = entries_of(str(victim_settings.journal_file))
        assert compacted[0][1] > early[0][1]  # the compaction happened
        full = early + [e for e in compacted if e[1] > early[-1][1]]
        assert [e[1] for e in full] == list(range(full[0][1], full[-1][1] + 1))
        victim_settings.journal_file.write_bytes(MAGIC + b"".join(encode_record(*e) for e in full))
        alone = SchedulerNode(victim_settings, state_factory=FakeState)  # no peer runs
        nodes.append(alone)
        got = wait_for(
            lambda: alone.digest() if alone.digest()[0] >= before[0] else None,
            timeout=10,
            what="the node replaying its own journal past the snapshot",
        )
        assert got == before
    finally:
        for node in nodes:
            node.close()


class HaltableState(FakeState):
    """A fake state that can say its state machine stopped (``halted``), as a real one does."""

    halted: str | None = None


def test_a_refused_snapshot_does_not_stop_compaction_for_good(tmp_path: Path) -> None:
    """While the state machine is stopped the node writes no snapshot (pysyncobj sees its
    serializer raise); once it could write again, it does. Before, pysyncobj's serializer
    waited for a FAILED that never came and the node never compacted again."""
    nodes = [SchedulerNode(s, state_factory=HaltableState) for s in cluster_settings(tmp_path)]
    try:
        leader = wait_for(lambda: leader_of(nodes), timeout=20, what="a leader")
        proposer = Proposer(leader, commit_timeout=2.0)
        for _ in range(5):
            proposer.propose(command())
        victim = next(n for n in nodes if n is not leader)
        victim.raft.snapshot_writer.retry_after = 0.1
        wait_for(
            lambda: victim.digest()[0] == leader.digest()[0], timeout=10, what="victim caught up"
        )
        victim._state.halted = "a handler raised (test)"
        victim.raft.force_compaction()
        wait_for(
            lambda: victim.instruments.registry.get_sample_value(
                "raftsched_snapshot_failures_total"
            ),
            timeout=10,
            what="the refused snapshot",
        )
        assert not victim.settings.dump_file.exists()
        victim._state.halted = None
        proposer.propose(command())  # something new to snapshot
        victim.raft.force_compaction()
        wait_for(victim.settings.dump_file.exists, timeout=10, what="a snapshot file")
    finally:
        for node in nodes:
            node.close()
