"""A slow disk never makes a healthy node stand for election (issue 16).

pysyncobj checks a follower's election deadline at the start of a tick and reads heartbeats
only at its end; when the journal's fsync ran on the tick thread (before that check), one
fsync longer than the election timeout made a healthy follower stand, and a slow fsync on the
leader held its heartbeats back. Here one node's journal fsyncs take twice the longest
election timeout (the ``RAFTSCHED_TEST_FSYNC_DELAY`` hook) while commands commit: no node may
become a candidate and the term must not move. Also pinned: what the slow node acknowledges
is still on its disk first, and the leader's own count waits for its disk
(:func:`~raftsched.raft.transport.durable_commit_index`).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_cluster_support import FakeState, cluster_settings, wait_for

from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.proposer import Proposer, new_request_id
from raftsched.core.commands import AckMaterialized
from raftsched.raft.transport import durable_commit_index
from tests.integration import node_hooks


@pytest.mark.parametrize("slow", ["follower", "leader"])
def test_a_slow_fsync_causes_no_election(tmp_path: Path, slow: str) -> None:
    # Timeouts above the defaults: a shared 2-core host that starves a process for 150 ms
    # must not be what stands a node here, only the fsync (twice the longest timeout).
    timings = {
        "raft_min_timeout": 0.6,
        "raft_max_timeout": 1.2,
        "append_entries_period": 0.1,
        "connection_timeout": 2.0,
    }
    nodes = [
        SchedulerNode(s, state_factory=FakeState)
        for s in cluster_settings(tmp_path, **timings)  # type: ignore[arg-type]
    ]
    try:
        leader = wait_for(lambda: _settled_leader(nodes), timeout=30, what="a settled leader")
        proposer = Proposer(leader, commit_timeout=5.0)
        proposer.propose(AckMaterialized(request_id=new_request_id(), now=datetime.now(UTC), seq=1))
        stood: list[tuple[str, str]] = []
        for node in nodes:
            node.add_role_listener(
                lambda role, node=node: stood.append((node.settings.self_address, role))
            )
        term = leader.term
        victim = leader if slow == "leader" else next(n for n in nodes if n is not leader)
        delay = 2 * victim.settings.raft_max_timeout
        node_hooks.install(victim, {node_hooks.FSYNC_DELAY_ENV: str(delay)})
        fsyncs_before = victim.raft.journal.fsyncs

        errors: list[BaseException] = []

        # commands flow for three slow fsyncs: each one long enough to miss an election deadline
        until = time.monotonic() + 3 * delay

        def write() -> None:
            try:
                while time.monotonic() < until:
                    proposer.propose(
                        AckMaterialized(request_id=new_request_id(), now=datetime.now(UTC), seq=1)
                    )
                    time.sleep(0.01)
            except BaseException as err:
                errors.append(err)

        writers = [threading.Thread(target=write) for _ in range(3)]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join(60)
        assert [s for s in stood if s[1] != "follower"] == [], stood
        assert [n.term for n in nodes] == [term] * 3
        assert not errors, errors
        # the slow disk was really in the way: several slow fsyncs while commands flowed
        wait_for(
            lambda: victim.raft.journal.fsyncs >= fsyncs_before + 2,
            timeout=10,
            what="slow fsyncs on the victim",
        )
        last = leader.raft.journal[-1][1]
        # the victim still takes part: its durable copy catches up, and so does its commit
        wait_for(
            lambda: victim.raft.journal.durable_index >= last and victim.raft.commit_index >= last,
            timeout=20,
            what="the slow node to hold every entry on disk",
        )
        assert [n.term for n in nodes] == [term] * 3
        assert leader.is_leader
    finally:
        for node in nodes:
            node.close()


def _settled_leader(nodes: list[SchedulerNode]) -> SchedulerNode | None:
    """The leader every node follows (a young cluster may elect more than once)."""
    leader = next((n for n in nodes if n.is_leader and n.quorum), None)
    if leader is None:
        return None
    address = leader.settings.self_address
    return leader if all(n.leader_address == address for n in nodes) else None


def test_a_leader_counts_itself_only_for_what_is_on_its_disk() -> None:
    def terms(index: int) -> int:
        return 1 if index <= 10 else 2

    # on disk up to 20: pysyncobj's count stands
    assert durable_commit_index(20, 15, 20, [20, 3], terms, 2) == 20
    # on disk up to 17, one follower at 20: only 17 (the other follower has nothing)
    assert durable_commit_index(20, 15, 17, [20, 3], terms, 2) == 17
    # both followers hold 19: a majority without the leader
    assert durable_commit_index(20, 15, 12, [19, 20], terms, 2) == 19
    # nothing new on disk here or on a majority: the commit stays
    assert durable_commit_index(20, 15, 14, [20, 3], terms, 2) == 15
    # what is durable is of an older term: counting alone may not commit it (Raft §5.4.2)
    assert durable_commit_index(12, 5, 9, [12, 0], terms, 2) == 5
    # a single node commits what is on its disk
    assert durable_commit_index(20, 15, 18, [], terms, 2) == 18
    # five nodes: three followers needed without the leader
    assert durable_commit_index(20, 11, 11, [20, 20, 19, 0], terms, 2) == 19
    assert durable_commit_index(20, 11, 11, [20, 20, 0, 0], terms, 2) == 11
    # pysyncobj proposing no more than what is committed is left alone
    assert durable_commit_index(15, 15, 0, [0, 0], terms, 2) == 15


def test_durable_index_follows_the_fsync_thread_and_truncations(tmp_path: Path) -> None:
    from raftsched.raft.journal import DurableJournal

    journal = DurableJournal(str(tmp_path / "raft.journal"))
    woken = threading.Event()
    try:
        journal.start_syncer(woken.set)
        journal.fsync_delay = 0.2
        for index in range(1, 6):
            journal.add(b"x", index, 1)
        assert journal.durable_index < 5  # written, not yet on disk: nothing may count it
        wait_for(lambda: journal.durable_index == 5, timeout=10, what="the fsync thread")
        assert woken.is_set()
        journal.deleteEntriesFrom(3)  # entries 4 and 5 go
        assert journal.durable_index == 3
        journal.add(b"y", 4, 2)
        assert journal.durable_index == 3
        wait_for(lambda: journal.durable_index == 4, timeout=10, what="the new entry on disk")
    finally:
        journal._destroy()
    reopened = DurableJournal(str(tmp_path / "raft.journal"))
    try:
        assert [reopened[i][1:] for i in range(len(reopened))] == [(1, 1), (2, 1), (3, 1), (4, 2)]
    finally:
        reopened._destroy()
