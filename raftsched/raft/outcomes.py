"""What a Raft node reports: a proposal's failure reasons and the node's role.

These are raftsched's names for pysyncobj's values, so that nothing outside ``raftsched.raft``
imports pysyncobj to read an outcome. The numbers are pysyncobj's own (``FAIL_REASON``,
``_RAFT_STATE``): a callback from its tick thread passes them as plain ints, and an
``IntEnum`` compares equal to them. ``tests/unit/test_raft_seam.py`` checks they still match.
"""

from __future__ import annotations

from enum import IntEnum


class FailReason(IntEnum):
    """Second argument of a proposal's callback (``SUCCESS``: the first is the result).

    Every reason but ``REQUEST_DENIED`` may hide an entry that was applied all the same: treat
    it as "unknown" and retry with the same request id (see the package's contract)."""

    SUCCESS = 0
    QUEUE_FULL = 1
    MISSING_LEADER = 2
    DISCARDED = 3
    NOT_LEADER = 4
    LEADER_CHANGED = 5
    REQUEST_DENIED = 6
    UNKNOWN_OUTCOME = 7


class Role(IntEnum):
    """A node's Raft role (pysyncobj's ``_RAFT_STATE``)."""

    FOLLOWER = 0
    CANDIDATE = 1
    LEADER = 2


ROLE_NAMES = {Role.FOLLOWER: "follower", Role.CANDIDATE: "candidate", Role.LEADER: "leader"}


def role_name(value: int) -> str:
    """ "follower", "candidate" or "leader" (``str(value)`` for a value pysyncobj never gives)."""
    try:
        return ROLE_NAMES[Role(value)]
    except ValueError:
        return str(value)
