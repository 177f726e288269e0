"""Slow fsync and power loss: the journal's fsync decided by the seed.

The durable journal fsyncs on a thread of its own (``raft/journal_sync.py``), whose timing no
seed decides. Inside :func:`seeded_fsync` there is no such thread: the tick's own flush does
nothing, and :meth:`Disks.step` fsyncs a node's journal when the seed says (each step with
probability ``rate``: a slow disk is a low rate). Acknowledgements and the leader's own count
wait for ``durable_index`` exactly as they do in production.

A power loss closes the node without an fsync and cuts its journal back to the length of its
last fsync (the journal's power-loss record, ``RAFTSCHED_TEST_JOURNAL_SYNCED``, keeps it);
the restart reads the file as a host after a power cut would.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Iterator
from typing import Any

from raftsched.raft.journal import SYNCED_ENV
from raftsched.raft.journal_sync import GroupCommit

_allowed = False
_real_flush = GroupCommit.flush


def _start_syncer(self: Any, wake: Any = None) -> None:
    # No thread: the simulation fsyncs (Disks.step). The journal is told a syncer runs (the
    # tick thread, which never waits for itself), so it leaves fsyncs and the commit index's
    # meta file to it rather than starting one again at every tick.
    self._wake = wake
    self._syncer = threading.current_thread()


def _flush(self: Any) -> bool:
    return bool(_allowed and _real_flush(self))


@contextlib.contextmanager
def seeded_fsync() -> Iterator[None]:
    saved = GroupCommit.start_syncer, GroupCommit.flush, os.environ.get(SYNCED_ENV)
    GroupCommit.start_syncer, GroupCommit.flush = _start_syncer, _flush  # type: ignore[method-assign]
    os.environ[SYNCED_ENV] = "1"
    try:
        yield
    finally:
        GroupCommit.start_syncer, GroupCommit.flush = saved[0], saved[1]  # type: ignore[method-assign]
        if saved[2] is None:
            os.environ.pop(SYNCED_ENV, None)
        else:
            os.environ[SYNCED_ENV] = saved[2]


def fsync(journal: Any) -> None:
    global _allowed
    _allowed = True
    try:
        journal.flush()
        if journal._meta_wanted:  # what the syncer does after its fsync
            journal._meta_wanted = False
            journal._store_meta()
    finally:
        _allowed = False


class Disks:
    def __init__(self, rng: random.Random, rate: float = 0.5) -> None:
        self.rng = rng
        self.rate = rate  # chance per step that a dirty journal is fsynced

    def step(self, nodes: dict[str, Any]) -> None:
        for address in sorted(nodes):
            journal = nodes[address].raft.journal
            if (journal.dirty or journal._meta_wanted) and self.rng.random() < self.rate:
                fsync(journal)

    @staticmethod
    def synced_length(node: Any) -> int | None:
        return getattr(node.raft.journal, "_noted_length", None)

    @staticmethod
    def cut(path: str, length: int | None) -> None:
        """What a power loss leaves: the journal as of its last fsync."""
        if length is not None and os.path.getsize(path) > length:
            os.truncate(path, length)
