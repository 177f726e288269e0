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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
