"""Read views copy only what changed (cluster/read_view.py ``capture`` with ``since``, fed by
core/changes.py ``ChangeFeed``): after any sequence of commands, a capture that reused the
previous one's copies equals a full copy of the state."""

from __future__ import annotations

import random
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st
from test_properties import KINDS, OPS, drive

from raftsched.cluster.read_view import ReadViews
from raftsched.cluster.state_copy import Captured, capture
from raftsched.core.changes import ChangeFeed
from raftsched.core.state import SchedulerState


def _same(incremental: Captured, full: Captured) -> None:
    assert incremental.index == full.index
    assert incremental.runs == full.runs
    assert incremental.tis == full.tis
    assert incremental.dags == full.dags


def _replay_capturing(log: list, every: list[bool]) -> int:
    """Replay ``log`` into a new state, capturing after the commands ``every`` marks; each
    capture checked against a full one. The number of captures that reused the last."""
    state = SchedulerState()
    last: Captured | None = None
    reused = 0
    for (command, index), take in zip(log, every, strict=True):
        state.apply(command, log_index=index)
        if take:
            incremental_ok = last is not None and last.state_id == id(state)
            current = capture(state, last)
            reused += incremental_ok
            full = capture(state)  # another reader: the next capture must copy everything
            _same(current, full)
            last = capture(state, None)  # the feed restarts: keep this one for the next
            _same(last, full)
    return reused


@given(OPS, st.randoms(use_true_random=False))
def test_a_capture_from_the_last_one_equals_a_full_copy(ops: list, rng: random.Random) -> None:
    driver = drive(ops)
    every = [rng.random() < 0.4 for _ in driver.log]
    _replay_capturing(driver.log, every)


def test_long_walks_reuse_copies_and_stay_equal() -> None:
    for seed in range(6):
        rng = random.Random(seed)
        ops = [
            (rng.choice(KINDS), rng.randint(0, 40), rng.randint(0, 40), rng.random() < 0.5)
            for _ in range(300)
        ]
        driver = drive(ops)
        every = [rng.random() < 0.3 for _ in driver.log]
        assert _replay_capturing(driver.log, every) > 10


def test_a_view_shares_the_copies_of_runs_that_did_not_change() -> None:
    driver = drive([("create", i, i, False) for i in range(8)] * 2)
    state = driver.state
    first = capture(state)
    second = capture(state, first)  # nothing applied in between: every copy is shared
    assert second.runs and all(second.runs[k] is first.runs[k] for k in first.runs)
    assert all(second.tis[k] is first.tis[k] for k in first.tis)


def test_the_feed_says_when_it_cannot_tell() -> None:
    feed = ChangeFeed()
    assert feed.drain(-1) is None  # first drain: no history
    epoch = feed.epoch
    feed.note(("d", "r1"))
    assert feed.drain(epoch) == {("d", "r1")}
    stale = feed.epoch - 1  # someone else's epoch
    feed.note(("d", "r2"))
    assert feed.drain(stale) is None
    epoch = feed.epoch
    for i in range(ChangeFeed.CAP + 1):
        feed.note(("d", str(i)))
    assert feed.drain(epoch) is None  # too many piled up: copy everything
    epoch = feed.epoch
    feed.note(("d", "r3"))
    feed.lose_track()  # a command stopped half-way
    assert feed.drain(epoch) is None


def test_the_freshness_stamp_never_builds_a_view() -> None:
    """Every API answer is stamped with the applied index; at 10,000 live runs a view build
    for it cost a call 0.1-0.3 s once a second (the stamp rebuilt views older than 1 s)."""
    from test_read_view import ListeningNode, populated
    from test_state_harness import T0

    class TellingNode(ListeningNode):
        @property
        def applied_index(self) -> int:
            return int(self.sim.state.applied_index)

    node = populated()
    telling = TellingNode(node.sim)
    views = ReadViews(telling, recheck=0.0)
    assert views.applied_index() == node.sim.state.applied_index
    before = node.sim.state.applied_index
    node.sim.create("d01", T0 + timedelta(days=30))
    assert node.sim.state.applied_index > before
    assert views.applied_index() == node.sim.state.applied_index
    assert views.builds == 0
