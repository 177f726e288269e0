"""Raft membership changes (pysyncobj dynamic membership), one at a time, confirmed.

``change_membership(node, address, add=...)`` asks the node (any node: pysyncobj forwards to the
leader) to add or remove ``address`` and returns once the change has committed. It raises:

- :class:`~raftsched.errors.MembershipBusy` (FAILED_PRECONDITION) when another change stays
  uncommitted for :data:`DENIED_WAIT` seconds. pysyncobj answers REQUEST_DENIED both while
  another change is uncommitted and while a new leader has not yet applied its own no-op entry
  (just after an election or a transfer); both clear within a few heartbeats, so a denial is
  retried that long first.
- :class:`~raftsched.errors.MembershipUnconfirmed` (DEADLINE_EXCEEDED) when the change was not
  confirmed within ``wait`` seconds (its outcome is unknown: check the cluster's status).

The caller checks quorum (a NoQuorumError says more than a timeout) and serializes calls.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from raftsched.errors import MembershipBusy, MembershipUnconfirmed
from raftsched.raft.outcomes import FailReason

MEMBERSHIP_WAIT = 10.0  # seconds for a change to commit
DENIED_WAIT = 3.0  # seconds a REQUEST_DENIED is retried before it reaches the caller
_RETRYABLE = {
    FailReason.QUEUE_FULL,
    FailReason.MISSING_LEADER,
    FailReason.DISCARDED,
    FailReason.NOT_LEADER,
    FailReason.LEADER_CHANGED,
    FailReason.REQUEST_DENIED,
}


def change_membership(node: Any, address: str, *, add: bool, wait: float = MEMBERSHIP_WAIT) -> None:
    started = time.monotonic()
    end = started + wait
    while True:
        box: list[Any] = []
        event = threading.Event()

        def callback(_result: Any, error: int, box: list[Any] = box, ev: Any = event) -> None:
            box.append(error)
            ev.set()

        change = node.add_member if add else node.remove_member
        change(address, callback)
        if not event.wait(max(0.1, end - time.monotonic())):
            break
        error = box[0]
        if error == FailReason.SUCCESS:
            return
        if error == FailReason.REQUEST_DENIED and time.monotonic() - started >= DENIED_WAIT:
            raise MembershipBusy(address)
        if error not in _RETRYABLE or time.monotonic() >= end:
            break
        time.sleep(0.1)
    raise MembershipUnconfirmed(address, wait)
