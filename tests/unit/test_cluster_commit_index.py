"""A follower commits only what its leader has vouched for (Raft §5.3), not its own tail.

pysyncobj 0.3.17 lets a follower commit up to its own last log index; a deposed leader with an
uncommitted tail then applies entries the new leader never had (found by the partition suite).
"""

from __future__ import annotations

from typing import Any

import pytest

from raftsched.raft.transport import safe_commit_index


@pytest.mark.parametrize(
    ("message", "current", "expected"),
    [
        # The copycat#265 case: an empty heartbeat at prevLogIdx 9 with commit 11 must not let
        # the follower commit its own (stale) entry 10.
        ({"commit_index": 11, "prevLogIdx": 9, "entries": []}, 9, 9),
        # Entries 10 and 11 arrive with the heartbeat: both are vouched for.
        ({"commit_index": 11, "prevLogIdx": 9, "entries": ["e10", "e11"]}, 9, 11),
        # The leader's commit is the bound when it is lower.
        ({"commit_index": 10, "prevLogIdx": 9, "entries": ["e10", "e11"]}, 9, 10),
        # A caught-up follower: nothing changes.
        ({"commit_index": 500, "prevLogIdx": 500, "entries": []}, 499, 500),
        # A large entry in chunks: only the finishing chunk vouches for it.
        ({"commit_index": 20, "prevLogIdx": 9, "transmission": "finish", "data": b""}, 9, 10),
        ({"commit_index": 20, "prevLogIdx": 9, "transmission": "process", "data": b""}, 9, 9),
        # A snapshot chunk never advances the commit (the snapshot sets its own).
        ({"commit_index": 900, "serialized": b"..."}, 40, 40),
        # Never asks for more than the leader committed, even from an old commit point.
        ({"commit_index": 3, "prevLogIdx": 9, "entries": []}, 2, 3),
    ],
)
def test_commit_index_is_held_to_what_the_leader_vouched_for(
    message: dict[str, Any], current: int, expected: int
) -> None:
    assert safe_commit_index(message, current) == expected
