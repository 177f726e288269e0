"""LeadingThread (cluster/leading.py): runs ``lead(term)`` only while the node leads, returns
to idle on a role change, retries after a failure, steps down after each term."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from raftsched.cluster.leading import LeadingThread

WAIT = 5.0  # bound of every wait below (never a timing assertion)


class FakeNode:
    def __init__(self) -> None:
        self.is_leader = False
        self.term = 1


def _until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_it_leads_only_while_leading_and_steps_down_on_a_role_change() -> None:
    node = FakeNode()
    led: list[int] = []
    after: list[int] = []
    idle = threading.Event()
    runner: LeadingThread

    def lead(term: int) -> None:
        led.append(term)
        while runner.leading(term):
            runner.wake.wait(0.05)

    runner = LeadingThread(
        node,
        lead,
        name="test-leading",
        retry_after=0.01,
        failed=lambda err: None,
        idle=idle.set,
        after=lambda: after.append(node.term),
    )
    runner.start()
    try:
        assert idle.wait(WAIT)
        assert led == []
        node.is_leader = True
        runner.wake.set()
        assert _until(lambda: led == [1])
        node.term = 2  # a new term: lead(1) returns, lead(2) starts
        assert _until(lambda: led == [1, 2])
        assert after == [2]
        node.is_leader = False
        assert _until(lambda: len(after) == 2)
        assert led == [1, 2]
    finally:
        runner.stop(WAIT)
    assert not runner.leading(2)


def test_a_failure_is_reported_and_retried_and_may_lead_holds_it_back() -> None:
    node = FakeNode()
    node.is_leader = True
    allowed = threading.Event()
    failures: list[str] = []
    calls: list[int] = []

    def lead(term: int) -> None:
        calls.append(term)
        if len(calls) < 3:
            raise RuntimeError(f"boom {len(calls)}")
        runner.stopping.wait(WAIT)

    runner = LeadingThread(
        node,
        lead,
        name="test-leading",
        retry_after=0.01,
        failed=lambda err: failures.append(str(err)),
        may_lead=allowed.is_set,
    )
    runner.start()
    try:
        time.sleep(0.05)
        assert calls == []  # may_lead says no
        allowed.set()
        runner.wake.set()
        assert _until(lambda: len(calls) == 3)
        assert failures == ["boom 1", "boom 2"]
    finally:
        runner.stop(WAIT)
