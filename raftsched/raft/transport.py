"""pysyncobj's transport and journal, as a scheduler node needs them.

- :func:`safe_commit_index`: the commit index a follower may take from an append_entries
  message (Raft's min(leaderCommit, last new entry); pysyncobj takes its own last index),
  after :func:`~raftsched.raft.append_entries.trim_append_entries` kept the message from
  truncating entries the journal already holds.
- :class:`PatchedTransport`: our patches of a pysyncobj transport (TCP here, in memory in
  :mod:`~raftsched.raft.memory_transport`): it notes when the leader last reached this node,
  applies :func:`safe_commit_index`, and holds append-entries acknowledgements
  (``next_node_idx``) until the journal's ``durable_index`` covers what they acknowledge
  (:meth:`PatchedTransport.release_held`; the fsync runs on the journal's own thread). It
  also reassembles a large entry's chunks and keeps a refusal from undoing the leader's step
  back (:class:`~raftsched.raft.append_entries.ChunkAssembler`,
  :func:`~raftsched.raft.append_entries.lower_refusal`).
- :class:`ContactTransport`: pysyncobj's TCP transport with those patches, and keep-alives.
- :func:`durable_commit_index`: the commit index a leader may take when it counts itself only
  for the entries on its own disk.
- pysyncobj builds its journal with the module-level ``createJournal(journalFile)``: the journals
  of scheduler nodes (registered by path with :func:`register_journal`) become
  :class:`~raftsched.raft.journal.DurableJournal`; any other SyncObj keeps pysyncobj's own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pysyncobj.syncobj as _pysyncobj_syncobj
from pysyncobj.tcp_connection import CONNECTION_STATE
from pysyncobj.transport import TCPTransport

from raftsched.core.versions import RELEASE
from raftsched.raft.append_entries import (
    ChunkAssembler,
    Conflict,
    lower_refusal,
    note_conflict,
    trim_append_entries,
)
from raftsched.raft.journal import DurableJournal

log = logging.getLogger(__name__)

RELEASE_KEY = "raftsched_release"  # in every Raft message this node sends (cluster/versions.py)


def safe_commit_index(message: dict[str, Any], current_commit: int) -> int:
    """The commit index a follower may take from an append_entries ``message`` (Raft §5.3:
    min(leaderCommit, index of the last new entry)).

    pysyncobj 0.3.17 takes min(leaderCommit, the follower's own last log index). A deposed
    leader that rejoins with an uncommitted tail then commits and APPLIES that tail when a
    heartbeat carries a higher commit index, and diverges until a snapshot replaces its state
    (the partition suite caught it: a digest disagreement after "truncating already-applied
    log entries"; the same bug as atomix/copycat#265 and rabbitmq/ra#508). The entries up to
    prevLogIdx + len(entries) are the ones this leader has just vouched for: no further.
    """
    leader_commit = int(message.get("commit_index", 0))
    if "prevLogIdx" not in message:  # a snapshot chunk: the snapshot sets its own commit point
        return min(leader_commit, current_commit)
    vouched = int(message["prevLogIdx"])
    transmission = message.get("transmission")
    if transmission is None:
        vouched += len(message.get("entries") or ())
    elif transmission == "finish":  # the last chunk of one large entry
        vouched += 1
    return min(leader_commit, vouched)  # never lowers a commit: pysyncobj only raises it


# pysyncobj builds its journal with the module-level createJournal(journalFile): journals of
# scheduler nodes (registered by path, with their durability) become DurableJournals; any other
# SyncObj in the process keeps pysyncobj's own.
def durable_commit_index(
    proposed: int,
    committed: int,
    durable: int,
    follower_matches: list[int],
    term_at: Callable[[int], int | None],
    current_term: int,
) -> int:
    """The commit index a leader may take, counting itself only up to ``durable``.

    pysyncobj proposes ``proposed``: the highest entry of the current term held by a majority
    when the leader counts itself for every entry it wrote. With the fsync off the tick
    thread, an entry the leader wrote may not be on its disk yet; Raft counts only durable
    copies. Up to ``durable`` pysyncobj's count stands; beyond it the followers alone must
    be a majority of the cluster (``follower_matches`` are their match indexes). An entry is
    committed by counting only if it is of the current term (Raft §5.4.2): entries before it
    follow. Never lower than ``committed``."""
    if proposed <= committed:
        return proposed
    members = len(follower_matches) + 1
    majority = members // 2 + 1
    matches = sorted(follower_matches, reverse=True)
    by_followers = matches[majority - 1] if len(matches) >= majority else 0
    allowed = min(proposed, max(durable, by_followers))
    if allowed <= committed:
        return committed
    if allowed < proposed and term_at(allowed) != current_term:
        return committed  # an older term's entry: only a current-term entry commits it
    return allowed


_original_create_journal = _pysyncobj_syncobj.createJournal
_journal_options: dict[str, bool] = {}
_journal_lock = threading.Lock()


def _create_journal(journal_file: str | None = None) -> Any:
    with _journal_lock:
        durable = _journal_options.get(str(journal_file)) if journal_file else None
    if durable is None:
        return _original_create_journal(journal_file)
    return DurableJournal(str(journal_file), durable=durable)


_pysyncobj_syncobj.createJournal = _create_journal
_REGULAR = b"\x00"  # pysyncobj's _COMMAND_TYPE.REGULAR, as the first byte of a command
_KEEPALIVE = {"type": "keepalive"}


class PatchedTransport:
    """Our patches of any pysyncobj ``Transport`` (a mixin before it): notes when the leader
    last reached us, holds a follower's commit index to what the leader has vouched for
    (:func:`safe_commit_index`), keeps append_entries from truncating what the journal holds,
    holds append-entries acknowledgements until the journal has them on disk
    (:meth:`release_held`), and tags every message with this node's release."""

    _syncObj: Any

    def send(self, node: Any, message: Any) -> bool:
        if isinstance(message, dict):
            message[RELEASE_KEY] = RELEASE  # this node's release (cluster/versions.py)
        held = getattr(self, "_held", None)
        if held is None:
            held = self._held = []
        if isinstance(message, dict) and message.get("type") == "next_node_idx":
            journal = getattr(self._syncObj, "journal", None)
            if journal is not None:  # a refusal asks for no more than a known conflict allows
                lower_refusal(message, getattr(self, "_conflict", None), journal, self._term())
            acknowledged = int(message.get("next_node_idx", 0)) - 1
            if held or (message.get("success") and acknowledged > self._durable_index()):
                # in order: a later answer never overtakes an earlier one. The term: an answer
                # held across a term change is dropped (next_node_idx carries no term, and a
                # new leader would take it for an answer to itself)
                held.append((node, message, acknowledged, self._term()))
                return True
        return bool(super().send(node, message))

    def release_held(self) -> None:
        """Send the acknowledgements held back whose entries are now on disk (tick thread)."""
        held = getattr(self, "_held", None)
        if not held:
            return
        durable, term, last = self._durable_index(), self._term(), self._last_index()
        sent = 0
        for node, message, acknowledged, held_term in held:
            # Dropped: an answer from an earlier term, and an acknowledgement of entries that a
            # truncation has removed since (the leader re-sent from an earlier index). Such an
            # ack can never become durable, and waiting for it held every later answer back
            # for good: the leader never heard from this follower again.
            stale = held_term != term or (message.get("success") and acknowledged > last)
            if not stale and message.get("success") and acknowledged > durable:
                break
            sent += 1
            if not stale:
                super().send(node, message)
        del held[:sent]

    def _durable_index(self) -> int:
        journal = getattr(self._syncObj, "journal", None)
        if not getattr(journal, "durable", False):
            return 1 << 62  # nothing to wait for
        return int(getattr(journal, "durable_index", 0))

    def _last_index(self) -> int:
        journal = getattr(self._syncObj, "journal", None)
        last = getattr(journal, "last_index", None)
        return int(last) if last is not None else 1 << 62

    def _term(self) -> int:
        return int(getattr(self._syncObj, "raftCurrentTerm", 0) or 0)

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        note_release = getattr(self._syncObj, "_note_release", None)
        if isinstance(message, dict) and note_release is not None:
            note_release(node, message)
        if isinstance(message, dict) and message.get("type") == "append_entries":
            note = getattr(self._syncObj, "_note_leader_contact", None)
            if note is not None:
                note()
            assembler = getattr(self, "_chunks", None)
            if assembler is None:
                assembler = self._chunks = ChunkAssembler()
            assembler.receive(node, message)  # a large entry: whole, or an empty "start"
            journal = getattr(self._syncObj, "journal", None)
            if journal is not None:  # keep what the journal holds (Raft §5.3)
                known = getattr(self, "_conflict", None)
                self._conflict: Conflict | None = note_conflict(
                    message,
                    journal,
                    int(getattr(self._syncObj, "raftCommitIndex", 0) or 0),
                    self._term(),
                    known,
                )
                if self._conflict is not known and self._conflict is not None:
                    log.info(
                        "entry %d (term %d) conflicts with the leader's log (term %d): asking"
                        " it to resend from %d",
                        self._conflict.index,
                        self._conflict.term_here,
                        self._conflict.leader_term,
                        self._conflict.hint,
                    )
                trim_append_entries(message, journal)
            if "commit_index" in message:
                current = int(getattr(self._syncObj, "raftCommitIndex", 0) or 0)
                message["commit_index"] = safe_commit_index(message, current)
        super()._onMessageReceived(node, message)


class ContactTransport(PatchedTransport, TCPTransport):
    """pysyncobj's TCP transport with our patches, and keep-alives on every link."""

    def keep_alive(self, interval: float) -> None:
        """Send a ``keepalive`` to every connected node at most every ``interval`` seconds
        (tick thread; pysyncobj ignores message types it does not know).

        pysyncobj closes a connection on which nothing was read for ``connectionTimeout``,
        and checks that only when it next sends on it. Two followers never write to each other,
        so when the leader died the first vote request found their link stale, closed it and
        was lost: the election waited for a reconnect and a second election timeout (about
        half of the ~0.55-s failover measured under load). With a message each way every
        ``interval`` the link is always fresh and a vote request arrives at once."""
        now = time.monotonic()
        if now - getattr(self, "_last_keepalive", 0.0) < interval:
            return
        self._last_keepalive = now
        for node, connection in list(self._connections.items()):
            if connection.state == CONNECTION_STATE.CONNECTED:
                TCPTransport.send(self, node, _KEEPALIVE)


def register_journal(journal_file: str, durable: bool) -> None:
    """The journal at ``journal_file`` is a DurableJournal (``durable``: with fsyncs)."""
    with _journal_lock:
        _journal_options[journal_file] = durable
