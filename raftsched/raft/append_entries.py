"""A follower never truncates entries it already holds unless they conflict (Raft §5.3).

pysyncobj 0.3.17 handles an append_entries by deleting everything after ``prevLogIdx`` and
appending the message's entries, whether or not the deleted entries conflict. A leader
re-sends from an earlier index whenever a delayed answer lowers its ``nextIndex`` (it
pipelines: it has already sent further), so a follower routinely dropped and re-wrote a
tail it had acknowledged (the "truncating already-applied log entries" CRITICAL lines). In
between, the acknowledged entries existed only in memory, the journal file having been cut:
a power loss there, or a message that covers less than the tail (a size-limited batch)
followed by the leader's crash, loses entries the leader may have counted as replicated;
hashicorp/raft#113 fixed the same bug. It also cost a journal rewrite per re-send.

:func:`trim_append_entries` rewrites such a message, before pysyncobj sees it, into the one
Raft means:

- entries the log already holds (same index and term: by Log Matching, identical with all
  before them) are dropped from the front, ``prevLogIdx``/``prevLogTerm`` moved past them;
  pysyncobj then truncates only from the first conflicting (or new) entry, as Raft does;
- when the message holds nothing new and the log goes further, and the log's last entry is of
  the sender's term, the message becomes a heartbeat at the log's last entry: everything up to
  it came from this very leader (one leader per term, and a leader never removes its own
  entries), so it matches the leader's log and is kept. A longer tail of an older term is
  left to pysyncobj (it cannot be shown to match, and a later message settles it).

The rewrite never claims more than the log provably shares with the leader, so what the
follower acknowledges (``prevLogIdx`` + the entries) stays true.

Two more follower-side repairs of pysyncobj 0.3.17, found by the partition suite (a follower
stuck for good at the commit index it had when a partition healed):

- :class:`Conflict` / :func:`note_conflict` / :func:`lower_refusal`: a refusal
  (``next_node_idx`` with ``reset``) asks the leader to resend from ``prevLogIdx`` (a term
  mismatch there) or from this log's end + 1 (``prevLogIdx`` beyond it), and the leader takes
  the LAST refusal it reads. It pipelines: one tick sends several messages (each up to 64 KiB,
  and an entry of 64 KiB or more alone), so the refusal of a later message (a higher index)
  undid the step back of the first, every tick: a deposed leader whose uncommitted tail
  conflicts with the new leader's log never walked back to where the logs agree, and never
  committed again. Once a term mismatch is seen, every refusal asks for no more than the
  point before the conflicting run of entries (never below the commit index + 1: committed
  entries are in every later leader's log), for as long as that conflicting entry is held.
- :class:`ChunkAssembler`: pysyncobj sends an entry of 64 KiB or more in chunks and labels a
  chunk "finish" when its end passes the COMMAND's length, not the pickled entry's (pickle
  protocol 2 stores bytes as latin-1 text in UTF-8: every byte >= 0x80 takes two). The
  follower then unpickles a cut entry and the tick thread dies with "failed _onTick"
  (UnpicklingError / UnicodeDecodeError) once per premature label, on every resend. The
  follower reassembles the chunks itself and hands pysyncobj one regular append_entries with
  the whole entry (so :func:`trim_append_entries` and the commit bound apply to it too); the
  chunks themselves reach pysyncobj empty, as a "start" it only acknowledges.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pysyncobj.pickle import loads as _pysyncobj_loads

Entry = tuple[bytes, int, int]  # pysyncobj's journal entry: (command, index, term)


def term_at(log: Sequence[Entry], index: int) -> int | None:
    """The term of the entry at Raft ``index`` in ``log`` (contiguous indexes), if held."""
    if not len(log):
        return None
    position = index - log[0][1]
    if 0 <= position < len(log):
        return int(log[position][2])
    return None


def trim_append_entries(message: dict[str, Any], log: Sequence[Entry]) -> bool:
    """Rewrite an append_entries ``message`` in place so that pysyncobj keeps what ``log``
    (the follower's journal) already holds; True if it was rewritten. A snapshot or chunked
    message, or one whose ``prevLogIdx`` does not match (pysyncobj refuses it), is left."""
    if "prevLogIdx" not in message or "transmission" in message or not len(log):
        return False
    entries = list(message.get("entries") or ())
    prev_index, prev_term = int(message["prevLogIdx"]), message.get("prevLogTerm")
    if term_at(log, prev_index) != prev_term:
        return False
    held = 0
    while held < len(entries) and term_at(log, entries[held][1]) == entries[held][2]:
        held += 1
    if held < len(entries):  # the first conflicting or new entry: truncate from there only
        if not held:
            return False
        message["prevLogIdx"], message["prevLogTerm"] = entries[held - 1][1], entries[held - 1][2]
        message["entries"] = entries[held:]
        return True
    if held:  # all held: a heartbeat at the last of them
        prev_index, prev_term = entries[-1][1], entries[-1][2]
    last_index, last_term = int(log[-1][1]), log[-1][2]
    if last_index > prev_index and last_term == message.get("term"):
        prev_index, prev_term = last_index, last_term  # the sender's own entries: kept
    elif not held:
        return False
    message["prevLogIdx"], message["prevLogTerm"], message["entries"] = prev_index, prev_term, []
    return True


# -- a refusal asks the leader to step back far enough (pysyncobj pipelines) -------------------


@dataclass(frozen=True)
class Conflict:
    """This log's entry at ``index`` (of term ``term_here``) is not the leader's: the leader
    (of term ``leader_term``) must resend from ``hint`` or lower before anything past it
    can match."""

    index: int
    term_here: int
    leader_term: int
    hint: int

    def holds(self, log: Sequence[Entry], current_term: int) -> bool:
        """Still true: the same leader's term, and the conflicting entry is still held."""
        return self.leader_term == current_term and term_at(log, self.index) == self.term_here


def resend_hint(log: Sequence[Entry], index: int, commit_index: int) -> int:
    """Where the leader should resend from when this log's entry at ``index`` conflicts: the
    first entry of its run of equal terms (terms never decrease along a log, so the run is
    found by bisection), never below ``commit_index`` + 1 nor past ``index``."""
    first = int(log[0][1])
    position = index - first
    term = log[position][2]
    start = first + bisect_left(log, term, 0, position, key=lambda entry: entry[2])
    return min(index, max(start, commit_index + 1, first + 1))


def note_conflict(
    message: dict[str, Any],
    log: Sequence[Entry],
    commit_index: int,
    current_term: int,
    known: Conflict | None,
) -> Conflict | None:
    """The conflict to remember once ``message`` (an append_entries) has arrived: a new one
    when its ``prevLogTerm`` differs from this log's term at ``prevLogIdx``, unless ``known``
    still holds and asks for as little."""
    if "prevLogIdx" not in message or not len(log):
        return known
    leader_term = int(message.get("term", 0))
    if leader_term < current_term:  # pysyncobj ignores a deposed leader's message
        return known
    index = int(message["prevLogIdx"])
    here = term_at(log, index)
    if here is None or here == message.get("prevLogTerm"):
        return known
    if index <= commit_index:  # committed entries match every later leader: not a conflict
        return known
    found = Conflict(index, here, leader_term, resend_hint(log, index, commit_index))
    if known is not None and known.holds(log, leader_term) and known.hint <= found.hint:
        return known
    return found


def lower_refusal(
    message: dict[str, Any], conflict: Conflict | None, log: Sequence[Entry], current_term: int
) -> bool:
    """Rewrite a refusal (``next_node_idx`` with ``reset``, no ``success``) in place to ask
    for no more than ``conflict.hint`` while the conflict holds; True if it was rewritten."""
    if conflict is None or message.get("success") or not message.get("reset"):
        return False
    asked = int(message.get("next_node_idx", 0))
    if asked <= conflict.hint or not conflict.holds(log, current_term):
        return False
    message["next_node_idx"] = conflict.hint
    return True


# -- one large entry in chunks, reassembled here (pysyncobj labels the last chunk early) -------


class ChunkAssembler:
    """Reassembles the chunks of one large entry per sender (see the module docstring)."""

    def __init__(self) -> None:
        self._parts: dict[Any, bytearray] = {}

    def receive(self, sender: Any, message: dict[str, Any]) -> None:
        """Rewrite a chunk ``message`` from ``sender`` in place: the chunk that completes the
        entry becomes a regular append_entries of it; any other becomes an empty "start"
        (pysyncobj only acknowledges it, with no reset). Other messages are left alone."""
        kind = message.get("transmission")
        if kind is None or "prevLogIdx" not in message:
            return
        data = bytes(message.get("data") or b"")
        if kind == "start":
            self._parts[sender] = bytearray(data)
        elif sender in self._parts:
            self._parts[sender] += data
        if kind == "finish" and sender in self._parts:
            entry = _whole_entry(self._parts[sender], int(message["prevLogIdx"]) + 1)
            if entry is not None:
                del self._parts[sender]
                if entry:
                    del message["transmission"], message["data"]
                    message["entries"] = [entry]
                    return
        # an empty "start": pysyncobj keeps no chunk of its own (and cannot unpickle a cut one)
        message["transmission"], message["data"] = "start", b""


def _whole_entry(data: bytearray, index: int) -> Entry | tuple[()] | None:
    """The entry pickled in ``data``; None while it is cut short (more chunks follow); ``()``
    when it unpickles to something that is not entry ``index`` (dropped: the leader resends)."""
    try:
        entry = _pysyncobj_loads(bytes(data))
    except Exception:  # a cut pickle: UnpicklingError, EOFError, UnicodeDecodeError, ...
        return None
    if (
        isinstance(entry, tuple | list)
        and len(entry) == 3
        and isinstance(entry[0], bytes)
        and entry[1] == index
    ):
        return (entry[0], int(entry[1]), int(entry[2]))
    return ()
