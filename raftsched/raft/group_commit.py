"""The node's side of the group commit: acknowledgements and the leader's own count wait for
the journal's fsync thread, never the tick thread.

:class:`DurableTicks` is mixed into the engine (``raft/engine.py``) before pysyncobj's ``SyncObj``:

- On its first tick the node starts the journal's fsync thread
  (:meth:`~raftsched.raft.journal_sync.GroupCommit.start_syncer`), with a pipe on the tick
  thread's poller that the fsync thread writes to when ``durable_index`` rose: the tick wakes
  at once instead of at its next 50-ms period.
- At the start of every tick the transport sends the append-entries acknowledgements whose
  entries are now on disk (:meth:`~raftsched.raft.transport.ContactTransport.release_held`);
  nothing on the tick thread waits for the disk, so heartbeats are read and an election
  deadline is never missed because of an fsync (a slow disk
  must not cause an election).
- A follower's tick wakes at its election deadline, not only every 50 ms
  (:meth:`DurableTicks._until_election_deadline`), and reads its sockets before pysyncobj
  checks a passed deadline (:meth:`DurableTicks._read_before_standing`).
- The leader counts itself towards a commit only for entries on its own disk: pysyncobj's
  commit loop counts the leader for every entry it wrote, so the journal hands each new
  commit index to :meth:`DurableTicks._guard_commit`, which lowers it
  (:func:`~raftsched.raft.transport.durable_commit_index`) when the followers alone are no
  majority for what is not yet durable here.

Until the first tick (and when the journal is not durable) the journal is fsynced inline at
the start of each tick, as before.
"""

from __future__ import annotations

import logging
from typing import Any

from pysyncobj.pipe_notifier import PipeNotifier

from raftsched.raft import clock
from raftsched.raft.outcomes import Role
from raftsched.raft.transport import durable_commit_index

log = logging.getLogger(__name__)

_LEADER = Role.LEADER


class DurableTicks:
    """Group commit off the tick thread (see the module's docstring)."""

    _durable_wake: PipeNotifier | None = None

    @property
    def journal(self) -> Any:
        return self._SyncObj__raftLog  # type: ignore[attr-defined]

    def _onTick(self, timeToWait: float = 0.0) -> None:
        self.sync_journal()
        self._read_before_standing()
        super()._onTick(self._until_election_deadline(timeToWait))  # type: ignore[misc]

    def _read_before_standing(self) -> None:
        """A follower whose election deadline passed reads its sockets before pysyncobj's
        tick checks that deadline.

        pysyncobj checks the deadline at the start of a tick and reads messages at its end:
        a follower that did not run for a while (a CPU stall on a loaded host) stood for
        election with the leader's heartbeats unread in its socket. Reading them first lets
        a heartbeat that arrived in time count; a leader that really went silent sent
        nothing, and the election goes ahead as before."""
        if self._SyncObj__raftState == _LEADER:  # type: ignore[attr-defined]
            return
        deadline = getattr(self, "_SyncObj__raftElectionDeadline", None)
        poller = getattr(self, "_poller", None)
        if deadline is None or poller is None or deadline >= clock.now():
            return
        transport = getattr(self, "_SyncObj__transport", None)
        if transport is not None and getattr(transport, "ready", False):
            poller.poll(0)

    def _until_election_deadline(self, time_to_wait: float) -> float:
        """How long this tick may sleep: no later than the election deadline.

        pysyncobj checks the deadline only when a tick runs, and an idle follower ticks every
        ``autoTickPeriod`` (50 ms) or when a message arrives. When the leader dies, its closed
        socket wakes both followers at the same instant, and from then on they tick in
        lockstep: two deadlines in the same 50-ms slot made both stand at the same tick, a
        split vote, and the election took another timeout (seen in 3 of 8 kills of
        ``scripts/bench/failover.py``). Waking at the deadline itself keeps the randomized
        timeouts apart and saves half a tick period on average. The deadline is on
        pysyncobj's clock (CLOCK_MONOTONIC_RAW), not ``time.monotonic``."""
        if self._SyncObj__raftState == _LEADER:  # type: ignore[attr-defined]
            return time_to_wait
        left = getattr(self, "_SyncObj__raftElectionDeadline", 0.0) - clock.now()
        if left <= 0:  # passed already (e.g. not connected to anyone): pysyncobj's pace
            return time_to_wait
        return min(time_to_wait, left + 0.001)

    def sync_journal(self) -> None:
        """Send the acknowledgements whose entries are on disk (tick thread). Before the
        journal's fsync thread runs, fsync here first."""
        journal = getattr(self, "_SyncObj__raftLog", None)
        if journal is not None and getattr(journal, "durable", False):
            if not getattr(journal, "syncing_in_background", True):
                self._start_background_sync(journal)
            if not getattr(journal, "syncing_in_background", True) and journal.dirty:
                journal.flush()
        transport = getattr(self, "_SyncObj__transport", None)
        release = getattr(transport, "release_held", None)
        if release is not None:
            release()
        keep_alive = getattr(transport, "keep_alive", None)
        if keep_alive is not None:
            keep_alive(self.conf.connectionTimeout / 4)  # type: ignore[attr-defined]

    def _start_background_sync(self, journal: Any) -> None:
        # on the tick thread: the poller is only ever touched by it
        poller = getattr(self, "_poller", None)
        if poller is None or getattr(self, "_closed", False):
            return
        self._durable_wake = PipeNotifier(poller)
        journal.commit_guard = self._guard_commit
        journal.start_syncer(self._durable_wake.notify)

    def _guard_commit(self, proposed: int, committed: int) -> int:
        """The journal's ``commit_guard``: the commit index this node may take (tick thread)."""
        if self._SyncObj__raftState != _LEADER:  # type: ignore[attr-defined]
            return proposed
        journal = self.journal
        others = self._SyncObj__otherNodes  # type: ignore[attr-defined]
        matches = self._SyncObj__raftMatchIndex  # type: ignore[attr-defined]
        allowed = durable_commit_index(
            proposed,
            committed,
            journal.durable_index,
            [int(matches.get(node, 0)) for node in others],
            lambda index: _term_at(journal, index),
            int(self.raftCurrentTerm),  # type: ignore[attr-defined]
        )
        if allowed != proposed:
            self._SyncObj__raftCommitIndex = allowed  # pysyncobj assigned it just before
        return allowed


def _term_at(journal: Any, index: int) -> int | None:
    if not len(journal):
        return None
    position = index - int(journal[0][1])
    if 0 <= position < len(journal):
        return int(journal[position][2])
    return None
