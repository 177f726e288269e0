"""Switches that put a fixed Raft bug back, inside the simulation only (``--bug NAME``).

Each undoes the effect of one patch of ``raftsched/raft`` for the duration of a block, by
replacing the name the patched code calls; nothing outside the simulation sees it.

- ``refusal``: a refusal undoes the step back an earlier one asked for
  (``append_entries.lower_refusal`` off: pysyncobj's own last-refusal-wins).
- ``ack``: a follower acknowledges entries before its journal has them on disk
  (``PatchedTransport._durable_index`` says everything is durable); found by a power loss.
- ``trim``: a re-sent append_entries truncates and rewrites an acknowledged tail
  (``trim_append_entries`` off).
- ``commit``: a follower takes ``min(leaderCommit, own last index)`` as its commit index
  (``safe_commit_index`` off).

Not here yet: the journal cleared when a snapshot is loaded (``snapshots.align_journal``):
the simulation writes no snapshots (the writer forks).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import raftsched.raft.transport as transport


def _last_refusal_wins(*_: Any) -> bool:
    return False


def _nothing_to_wait_for(self: Any) -> int:
    return 1 << 62


def _no_trim(*_: Any) -> None:
    return None


def _pysyncobj_commit(message: dict[str, Any], current: int) -> int:
    return int(message.get("commit_index", current))


PATCHES: dict[str, tuple[Any, str, Any]] = {
    "refusal": (transport, "lower_refusal", _last_refusal_wins),
    "ack": (transport.PatchedTransport, "_durable_index", _nothing_to_wait_for),
    "trim": (transport, "trim_append_entries", _no_trim),
    "commit": (transport, "safe_commit_index", _pysyncobj_commit),
}


@contextlib.contextmanager
def reintroduced(name: str | None) -> Iterator[None]:
    if name is None:
        yield
        return
    owner, attribute, replacement = PATCHES[name]
    saved = getattr(owner, attribute)
    setattr(owner, attribute, replacement)
    try:
        yield
    finally:
        setattr(owner, attribute, saved)
