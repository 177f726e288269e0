"""A caught-up materializer driver paces its small rounds (issue #11): a trickle of commits
(chains of tasks) does not cost one AckMaterialized entry per commit, yet the last ack always
comes, with no commit after it to wake the driver; the quarantine count is read at most every
QUARANTINE_READ_INTERVAL, and still reaches the status once a refused entry was written.

The driver runs for real, over the in-memory sink, with test_store_quarantine's stand-ins for
the node (a leader that never changes) and the proposer (an ack commits at once)."""

from __future__ import annotations

import time
from typing import Any

from test_store_materializer import Outbox
from test_store_quarantine import DUP, _eventually, _Node, _Proposer, _State

from raftsched.cluster import materializer_driver as md
from raftsched.cluster.materializer_driver import MaterializerDriver
from raftsched.store.memory import MemoryMaterializer


class _CountingProposer(_Proposer):
    def __init__(self, node: _Node) -> None:
        super().__init__(node)
        self.acks: list[int] = []

    def propose(self, command: Any, **kwargs: Any) -> None:
        if hasattr(command, "seq"):
            self.acks.append(command.seq)
        super().propose(command, **kwargs)


def test_a_trickle_of_commits_is_acknowledged_at_most_every_ack_interval() -> None:
    box = Outbox()
    box.dag()
    node = _Node(_State(box.entries))
    proposer = _CountingProposer(node)
    sink = MemoryMaterializer()
    driver = MaterializerDriver(node, proposer, sink, batch=1000, idle_wait=30.0)  # type: ignore[arg-type]
    driver.start()
    try:
        assert _eventually(lambda: node.state.acked == 1)
        first = len(proposer.acks)
        started = time.monotonic()
        for day in range(40):  # one commit at a time, each waking the driver
            box.run(day)
            with node.lock:
                node.state.entries = list(box.entries)
            driver._wake.set()
            time.sleep(0.01)
        elapsed = time.monotonic() - started
        last = box.entries[-1].seq
        # the last ack comes by itself: nothing commits after it, idle_wait is 30 s
        assert _eventually(lambda: node.state.acked == last, timeout=md.ACK_INTERVAL * 40)
        assert sink.watermark() == last
        acks = proposer.acks[first:]
        assert acks == sorted(acks) and acks[-1] == last
        # never closer than ACK_INTERVAL apart while caught up: a bound by construction
        assert len(acks) <= elapsed / md.ACK_INTERVAL + 2, (len(acks), elapsed)
        assert len(acks) < 40  # not one per commit
    finally:
        driver.stop()


def test_an_ack_put_off_is_sent_with_no_commit_to_wake_the_driver() -> None:
    box = Outbox()
    box.dag()
    node = _Node(_State(box.entries))
    proposer = _CountingProposer(node)
    driver = MaterializerDriver(node, proposer, MemoryMaterializer(), idle_wait=30.0)  # type: ignore[arg-type]
    driver.start()
    try:
        assert _eventually(lambda: node.state.acked == 1)
        box.run(0)  # right after that ack: its own is put off (ACK_INTERVAL)...
        with node.lock:
            node.state.entries = list(box.entries)
        driver._wake.set()
        # ...and sent when it is due, not at the next commit or idle_wait (30 s)
        assert _eventually(lambda: node.state.acked == 2, timeout=10.0)
    finally:
        driver.stop()


def test_a_refused_entry_reaches_the_quarantine_count_without_another_commit() -> None:
    box = Outbox()
    box.dag()
    box.run(0)
    node = _Node(_State(box.entries))
    sink = MemoryMaterializer(refuse=lambda e: "unique" if e.data.get("run_id") == DUP else None)
    driver = MaterializerDriver(node, _Proposer(node), sink, batch=1000, idle_wait=30.0)  # type: ignore[arg-type]
    driver.start()
    try:
        assert _eventually(lambda: node.state.acked == 2 and driver.quarantined == 0)
        box.run(0, run_id=DUP)  # refused by the DB: quarantined
        with node.lock:
            node.state.entries = list(box.entries)
        driver._wake.set()
        timeout = 3 * md.QUARANTINE_READ_INTERVAL + 5
        assert _eventually(lambda: driver.quarantined == 1, timeout=timeout)
        assert node.state.acked == 3
    finally:
        driver.stop()
