"""SchedulerNode.hand_over on a real 3-node pysyncobj cluster in this process: the leader hands
over to an up-to-date follower in one term; a follower or a disabled handover returns at once;
a restarted node rejoins without forcing an election."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_cluster_support import FakeState, cluster_settings, wait_for

from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.proposer import Proposer, new_request_id
from raftsched.core.commands import AckMaterialized


def leader_of(nodes: list[SchedulerNode]) -> SchedulerNode | None:
    leaders = [n for n in nodes if n.is_leader and n.quorum]
    if len(leaders) != 1:
        return None
    address = leaders[0].settings.self_address
    followers = [n for n in nodes if n is not leaders[0]]
    return leaders[0] if all(n.leader_address == address for n in followers) else None


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[SchedulerNode]]:
    nodes = [SchedulerNode(s, state_factory=FakeState) for s in cluster_settings(tmp_path)]
    try:
        wait_for(lambda: leader_of(nodes), timeout=20, what="a settled leader")
        yield nodes
    finally:
        for node in nodes:
            node.close()


def propose(node: SchedulerNode, count: int) -> None:
    proposer = Proposer(node, commit_timeout=2.0)
    for _ in range(count):
        now = datetime.now(UTC)
        assert proposer.propose(AckMaterialized(request_id=new_request_id(), now=now, seq=1)).ok


def test_the_leader_hands_over_in_one_term(cluster: list[SchedulerNode]) -> None:
    leader = wait_for(lambda: leader_of(cluster), timeout=10, what="a leader")
    propose(leader, 5)
    term = leader.term
    follower = next(n for n in cluster if n is not leader)
    assert follower.raft.hand_over(3.0) is None  # a follower has nothing to hand over
    assert leader.raft.hand_over(0) is None  # handover_timeout = 0: stop as after a crash
    assert leader.is_leader
    new = leader.raft.hand_over(3.0)
    assert new is not None and new != leader.settings.self_address
    assert not leader.is_leader
    winner = next(n for n in cluster if n.settings.self_address == new)
    wait_for(lambda: leader_of(cluster) is winner, timeout=5, what="the new leader settled")
    assert {n.term for n in cluster} == {term + 1}  # TimeoutNow: one term, no split vote
    propose(winner, 3)  # the new leader commits; the old one follows it
    wait_for(
        lambda: leader.digest()[0] == winner.digest()[0], timeout=5, what="the old leader in step"
    )


def test_a_restarted_node_rejoins_without_an_election(tmp_path: Path) -> None:
    settings = cluster_settings(tmp_path)
    nodes = [SchedulerNode(s, state_factory=FakeState) for s in settings]
    try:
        leader = wait_for(lambda: leader_of(nodes), timeout=20, what="a settled leader")
        propose(leader, 3)
        # The victim is the follower with the lowest address: it does not open connections to
        # the others (pysyncobj: the greater address connects), so the leader reaches it only
        # on its next connection retry, after the victim's first election timeout.
        followers = sorted(
            (n for n in nodes if n is not leader), key=lambda n: n.settings.self_address
        )
        victim = followers[0]
        term = leader.term
        victim.close()
        nodes.remove(victim)
        propose(leader, 3)  # the victim's log is now behind: it cannot win, only disrupt
        restarted = SchedulerNode(
            replace(next(s for s in settings if s.self_address == victim.settings.self_address)),
            state_factory=FakeState,
        )
        nodes.append(restarted)
        wait_for(
            lambda: restarted.leader_address == leader.settings.self_address,
            timeout=10,
            what="the restarted node following the leader",
        )
        time.sleep(0.5)  # longer than an election timeout: a disruption would show now
        assert leader.is_leader
        assert {n.term for n in nodes} == {term}, [(n.settings.self_address, n.term) for n in nodes]
    finally:
        for node in nodes:
            node.close()
