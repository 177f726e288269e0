"""A follower's held append-entries answers (raft/transport.py ``ContactTransport``).

Answers wait, in order, until the journal's fsync covers what they acknowledge. An answer
that acknowledges entries a truncation has removed since can never become durable: it must be
dropped, not wait at the head of the queue and hold every later answer back (the follower then
never reached the leader again and stayed behind for good).
"""

from __future__ import annotations

from typing import Any

import pytest
from pysyncobj.transport import TCPTransport

from raftsched.raft.transport import ContactTransport


class _Journal:
    durable = True

    def __init__(self, durable_index: int, last_index: int) -> None:
        self.durable_index = durable_index
        self.last_index = last_index


class _SyncObj:
    def __init__(self, journal: _Journal, term: int = 5) -> None:
        self.journal = journal
        self.raftCurrentTerm = term


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    out: list[Any] = []
    monkeypatch.setattr(TCPTransport, "send", lambda self, node, message: out.append(message))
    return out


def _transport(journal: _Journal) -> ContactTransport:
    transport = object.__new__(ContactTransport)
    transport._syncObj = _SyncObj(journal)  # type: ignore[attr-defined]
    return transport


def _ack(next_index: int, success: bool = True) -> dict[str, Any]:
    return {"type": "next_node_idx", "next_node_idx": next_index, "success": success}


def test_acks_wait_for_the_fsync_in_order(sent: list[Any]) -> None:
    journal = _Journal(durable_index=10, last_index=20)
    transport = _transport(journal)
    transport.send("leader", _ack(16))  # acknowledges 15: not durable yet
    transport.send("leader", _ack(11, success=False))  # queued behind it, in order
    transport.release_held()
    assert sent == []
    journal.durable_index = 15
    transport.release_held()
    assert [m["next_node_idx"] for m in sent] == [16, 11]


def test_an_ack_of_truncated_entries_is_dropped_and_holds_nothing_back(sent: list[Any]) -> None:
    journal = _Journal(durable_index=10, last_index=20)
    transport = _transport(journal)
    transport.send("leader", _ack(21))  # acknowledges 20, written but not yet durable
    # the leader re-sent from index 12: entries 12.. went, the log now ends at 14
    journal.last_index, journal.durable_index = 14, 11
    transport.send("leader", _ack(15))  # acknowledges 14
    transport.release_held()
    assert sent == []  # 14 is not durable yet, and the stale ack is gone
    journal.durable_index = 14
    transport.release_held()
    assert [m["next_node_idx"] for m in sent] == [15]
