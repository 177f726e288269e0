"""Test-only hooks, read from the environment when a node starts. Not in the product: a node
started by ``tests/integration/hooked_node.py`` (the harness does so when a node's environment
names one of these variables) installs them; ``raftsched scheduler`` never does.

``RAFTSCHED_TEST_APPLY_DELAY=SECONDS``: this node's replica lags. While it follows, it
applies each committed entry SECONDS after the leader told it the entry was committed: the
commit index carried by the leader's append_entries is held back that long before the Raft
layer sees it. Nothing else changes: the node still receives, stores and acknowledges every entry
at once (the leader's commits do not wait for it), answers votes and heartbeats on time
(no spurious elections), and keeps serving reads from its state, which is simply behind —
as on a slow or distant machine. A leader is never delayed (it has no one to wait for).
Tests of the consistency guarantees use it (tests/integration/test_consistency.py); the node
logs a warning when it is set.

``RAFTSCHED_TEST_FSYNC_DELAY=SECONDS``: this node's disk is slow. Every fsync of its Raft
journal takes SECONDS longer (a sleep before it), as on a busy disk where fsyncs reach 100+
ms. The node must stay a healthy follower (or leader) through it: no election may follow
(tests/unit/test_cluster_slow_fsync.py); its acknowledgements simply come later.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from raftsched.cluster.node import SchedulerNode

log = logging.getLogger(__name__)

APPLY_DELAY_ENV = "RAFTSCHED_TEST_APPLY_DELAY"
MAX_APPLY_DELAY = 5.0  # seconds
FSYNC_DELAY_ENV = "RAFTSCHED_TEST_FSYNC_DELAY"
MAX_FSYNC_DELAY = 5.0  # seconds
HOOK_ENVS = (APPLY_DELAY_ENV, FSYNC_DELAY_ENV)


def install(node: SchedulerNode, env: dict[str, str] | None = None) -> None:
    """Install the hooks the environment asks for (none when it asks for none)."""
    env = dict(os.environ) if env is None else env
    delay = _seconds(env, APPLY_DELAY_ENV, MAX_APPLY_DELAY)
    if delay > 0:
        ApplyDelay(delay).install(node)
    delay = _seconds(env, FSYNC_DELAY_ENV, MAX_FSYNC_DELAY)
    if delay > 0:
        slow_fsync(node, delay)


def slow_fsync(node: SchedulerNode, delay: float) -> None:
    """Every journal fsync of ``node`` takes ``delay`` seconds longer."""
    journal = node.raft.journal
    if not hasattr(journal, "fsync_delay"):
        log.error("%s: this node's journal has no fsync to slow down: ignored", FSYNC_DELAY_ENV)
        return
    log.warning(
        "%s = %.3f: this node's disk is slow on purpose (a test hook)", FSYNC_DELAY_ENV, delay
    )
    journal.fsync_delay = delay


def _seconds(env: dict[str, str], name: str, most: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return 0.0
    try:
        return min(max(float(text), 0.0), most)
    except ValueError:
        log.error("%s = %r is not a number of seconds: ignored", name, text)
        return 0.0


class ApplyDelay:
    """Holds back the commit index a follower learns from the leader by ``delay`` seconds."""

    def __init__(self, delay: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.delay = delay
        self._clock = clock
        self._lock = threading.Lock()
        self._heard: collections.deque[tuple[float, int]] = collections.deque()
        self._released = 0

    def install(self, node: SchedulerNode) -> None:
        log.warning(
            "%s = %.3f: this node's replica lags on purpose (a test hook)",
            APPLY_DELAY_ENV,
            self.delay,
        )

        def received(peer: Any, message: Any, deliver: Callable[[Any, Any], None]) -> None:
            if _is_append(message) and "commit_index" in message:
                message["commit_index"] = self.hold_back(int(message["commit_index"]))
            deliver(peer, message)

        node.raft.filter_received(received)

    def hold_back(self, commit_index: int) -> int:
        """The highest commit index heard at least ``delay`` seconds ago."""
        now = self._clock()
        with self._lock:
            self._heard.append((now, commit_index))
            while self._heard and self._heard[0][0] <= now - self.delay:
                self._released = max(self._released, self._heard.popleft()[1])
            return self._released


def _is_append(message: Any) -> bool:
    return isinstance(message, dict) and message.get("type") == "append_entries"
