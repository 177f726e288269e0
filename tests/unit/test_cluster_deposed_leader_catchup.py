"""A deposed leader with an uncommitted tail catches up once its partition heals.

The partition suite's "the cluster never settled" flake (seed 1, follower stuck at index 284):
the leader is cut off, keeps appending what it is asked to (never committed), and the other
two elect a new leader whose log then holds large entries (64 KiB or more: each is sent alone,
so one tick sends several messages). After the heal, pysyncobj's refusals of the later
messages undid the new leader's step back every tick (it keeps the last refusal it reads),
and the old leader never reached the point where the logs agree: it stayed at its old commit
index for good (raft/append_entries.py, ``lower_refusal``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_cluster_support import FakeState, cluster_settings, wait_for

from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.proposer import Proposer, new_request_id
from raftsched.core.commands import AckMaterialized
from raftsched.raft.transport import ContactTransport

pytestmark = pytest.mark.timeout(40)

BIG = 100_000  # bytes: over pysyncobj's 64-KiB batch, so each such entry is sent alone


def _command(request_id: str | None = None) -> AckMaterialized:
    return AckMaterialized(request_id=request_id or new_request_id(), now=datetime.now(UTC), seq=1)


@pytest.fixture
def cut_off(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Raft addresses whose messages are dropped both ways (a partition, no disconnect)."""
    blocked: set[str] = set()
    send, receive = ContactTransport.send, ContactTransport._onMessageReceived

    def _cut(transport: Any, node: Any) -> bool:
        return bool({transport._selfNode.address, getattr(node, "address", None)} & blocked)

    def dropping_send(self: Any, node: Any, message: Any) -> bool:
        return True if _cut(self, node) else bool(send(self, node, message))

    def dropping_receive(self: Any, node: Any, message: Any) -> None:
        if not _cut(self, node):
            receive(self, node, message)

    monkeypatch.setattr(ContactTransport, "send", dropping_send)
    monkeypatch.setattr(ContactTransport, "_onMessageReceived", dropping_receive)
    return blocked


def test_a_deposed_leader_with_a_conflicting_tail_catches_up(
    tmp_path: Path, cut_off: set[str]
) -> None:
    nodes = [SchedulerNode(s, state_factory=FakeState) for s in cluster_settings(tmp_path)]
    try:
        old = wait_for(
            lambda: next((n for n in nodes if n.is_leader), None), timeout=15, what="a leader"
        )
        proposer = Proposer(old, commit_timeout=5.0)
        for _ in range(5):
            assert proposer.propose(_command()).ok
        committed = old.raft.commit_index
        cut_off.add(old.settings.self_address)
        for _ in range(30):  # its own tail: appended, never committed
            old.submit(_command(), lambda _result, _error: None)
        wait_for(lambda: old.raft.journal[-1][1] >= committed + 30, timeout=5, what="the old tail")
        others = [n for n in nodes if n is not old]
        new = wait_for(
            lambda: next((n for n in others if n.is_leader), None), timeout=15, what="a new leader"
        )
        proposer = Proposer(new, commit_timeout=5.0)
        for i in range(40):  # large entries among small ones, across the old tail's indexes
            assert proposer.propose(_command(f"big-{i}-" + "x" * BIG if i % 4 == 1 else None)).ok
        wait_for(lambda: not old.is_leader, timeout=10, what="the old leader to step down")
        assert old.raft.commit_index == committed  # nothing of its own tail was committed
        cut_off.clear()

        def caught_up() -> bool:
            leader = next((n for n in nodes if n.is_leader), None)
            if leader is None or leader is old:
                return False
            target = leader.raft.commit_index
            return all(
                n.raft.commit_index >= target and n.raft.last_applied >= target for n in nodes
            )

        wait_for(caught_up, timeout=15, what="the old leader to catch up after the heal")
        leader = next(n for n in nodes if n.is_leader)
        last = leader.raft.commit_index
        assert old.raft.journal[-1][1] >= last
        assert [e[2] for e in old.raft.journal[:last]] == [e[2] for e in leader.raft.journal[:last]]
        shared = min(len(old._state.applied), len(leader._state.applied))
        assert old._state.applied[:shared] == leader._state.applied[:shared]
    finally:
        for node in nodes:
            node.close()
