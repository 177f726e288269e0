"""A follower keeps the entries it already holds: trim_append_entries (Raft §5.3); its
refusals never undo the leader's step back (lower_refusal); a large entry's chunks are
reassembled here (ChunkAssembler)."""

from __future__ import annotations

import pickle
from typing import Any

import pysyncobj.pickle as pysyncobj_pickle
import pytest

from raftsched.raft.append_entries import (
    ChunkAssembler,
    lower_refusal,
    note_conflict,
    resend_hint,
    term_at,
    trim_append_entries,
)


def log_of(*terms: int, first: int = 1) -> list[tuple[bytes, int, int]]:
    return [(b"c%d" % (first + i), first + i, term) for i, term in enumerate(terms)]


def message(prev: int, prev_term: int, entries: list[Any], term: int = 2) -> dict[str, Any]:
    return {
        "type": "append_entries",
        "term": term,
        "commit_index": 0,
        "prevLogIdx": prev,
        "prevLogTerm": prev_term,
        "entries": entries,
    }


def test_term_at_reads_contiguous_indexes_from_any_first_index() -> None:
    log = log_of(1, 1, 2, first=10)
    assert [term_at(log, i) for i in (9, 10, 12, 13)] == [None, 1, 2, None]
    assert term_at([], 1) is None


def test_a_resend_of_held_entries_truncates_nothing() -> None:
    # the leader (term 2) re-sent 3..4 after a delayed answer; the follower holds up to 6
    log = log_of(1, 1, 2, 2, 2, 2)
    msg = message(2, 1, log[2:4])
    assert trim_append_entries(msg, log)
    assert (msg["prevLogIdx"], msg["prevLogTerm"], msg["entries"]) == (6, 2, [])


def test_held_prefix_is_dropped_and_truncation_starts_at_the_first_new_entry() -> None:
    log = log_of(1, 1, 2, 2)
    new = log[2:4] + log_of(2, 2, first=5)
    msg = message(2, 1, new)
    assert trim_append_entries(msg, log)
    assert (msg["prevLogIdx"], msg["prevLogTerm"]) == (4, 2)
    assert [e[1] for e in msg["entries"]] == [5, 6]


def test_a_conflict_still_truncates_from_the_conflicting_entry() -> None:
    log = log_of(1, 1, 1, 1)  # 3..4 of term 1 were never committed; the term-2 leader differs
    new = [(b"x", 3, 2), (b"y", 4, 2)]
    msg = message(2, 1, list(new))
    assert not trim_append_entries(msg, log)  # pysyncobj truncates from 3: Raft's own rule
    assert msg["entries"] == new and msg["prevLogIdx"] == 2
    log = log_of(1, 1, 2, 1)  # index 3 held, 4 conflicts (impossible in Raft; still handled)
    msg = message(2, 1, [log[2], (b"y", 4, 2)])
    assert trim_append_entries(msg, log)
    assert (msg["prevLogIdx"], msg["entries"]) == (3, [(b"y", 4, 2)])


def test_an_older_terms_tail_is_left_to_pysyncobj() -> None:
    # held up to 2, then entries of term 1 that the term-2 leader has not vouched for
    log = log_of(1, 1, 1, 1)
    msg = message(1, 1, [log[1]])
    assert trim_append_entries(msg, log)  # a heartbeat at 2: pysyncobj drops 3..4
    assert (msg["prevLogIdx"], msg["prevLogTerm"], msg["entries"]) == (2, 1, [])
    heartbeat = message(4, 1, [])
    assert not trim_append_entries(heartbeat, log)


def test_refused_snapshot_and_chunk_messages_are_left_alone() -> None:
    log = log_of(1, 2)
    for msg in (
        message(2, 1, []),  # prevLogTerm does not match: pysyncobj refuses it
        message(7, 2, []),  # beyond the log
        {"type": "append_entries", "term": 2, "serialized": b"..."},
        {**message(1, 1, []), "transmission": "start", "data": b""},
    ):
        before = dict(msg)
        assert not trim_append_entries(msg, log)
        assert msg == before
    assert not trim_append_entries(message(0, 0, []), [])


# -- refusals: the leader takes the last one it reads, so none may undo a step back -----------


def refusal(next_index: int) -> dict[str, Any]:
    return {"type": "next_node_idx", "next_node_idx": next_index, "reset": True, "success": False}


def test_a_refusal_never_undoes_the_step_back_to_a_known_conflict() -> None:
    # entries 1..7 committed (term 1); 8..37 an uncommitted tail of the deposed leader's term 1.
    # The term-2 leader pipelines: one tick sends 21.. after 20 (a 64 KiB entry alone, then
    # the rest); pysyncobj refuses each at its own prevLogIdx, and the leader keeps the last
    # refusal it reads (21): it probed 20, 21, 20, 21... forever.
    log = log_of(*[1] * 37)
    conflict = None
    refusals = []
    for prev in (20, 21):  # prevLogTerm 2 where this log has 1
        conflict = note_conflict(message(prev, 2, []), log, 7, 2, conflict)
        answer = refusal(prev)  # pysyncobj's own answer to a term mismatch
        lower_refusal(answer, conflict, log, 2)
        refusals.append(answer["next_node_idx"])
    # both ask for the first entry after the commit index: the whole conflicting run goes
    assert refusals == [8, 8]
    beyond = refusal(38)  # "prevLogIdx beyond my log": pysyncobj asks for its end + 1
    assert lower_refusal(beyond, conflict, log, 2) and beyond["next_node_idx"] == 8


def test_the_step_back_stops_at_the_run_of_the_conflicting_term() -> None:
    log = log_of(1, 1, 1, 2, 2, 2, 3, 3)  # commit index 2; 7..8 of term 3 conflict
    conflict = note_conflict(message(8, 4, [], term=4), log, 2, 4, None)
    assert conflict is not None and conflict.hint == 7
    # a mismatch at or below the commit index is no conflict (those entries match any leader)
    assert note_conflict(message(2, 4, [], term=4), log, 2, 4, None) is None
    # a deposed leader's message (term 3 < 4) is ignored by pysyncobj: no conflict either
    assert note_conflict(message(8, 2, [], term=3), log, 2, 4, None) is None
    assert resend_hint(log, 5, 0) == 4 and resend_hint(log, 3, 0) == 2  # first + 1 at least
    assert resend_hint(log_of(1, 1, 2, first=10), 12, 5) == 12


def test_a_conflict_no_longer_held_leaves_refusals_alone() -> None:
    log = log_of(1, 1, 1, 1)
    conflict = note_conflict(message(4, 2, []), log, 1, 2, None)
    assert conflict is not None and conflict.hint == 2
    for answer, log_now, term in (
        (refusal(5), log_of(1, 2, 2, 2), 2),  # entry 4 replaced by the leader's own
        (refusal(3), log_of(1, 1), 2),  # the tail truncated away
        (refusal(5), log, 3),  # a later leader's term: it was learned from another log
        (
            {**refusal(5), "reset": False},
            log,
            2,
        ),  # a chunk's acknowledgement: the leader ignores it
        ({**refusal(5), "success": True}, log, 2),
    ):
        before = dict(answer)
        assert not lower_refusal(answer, conflict, log_now, term)
        assert answer == before
    assert not lower_refusal(refusal(2), conflict, log, 2)  # asks for no more already


# -- chunks: one large entry, reassembled here -----------------------------------------------


def pysyncobj_chunks(entry: tuple[bytes, int, int], size: int = 2**16) -> list[dict[str, Any]]:
    """The messages pysyncobj 0.3.17's __sendAppendEntries sends for one large entry: its
    'finish' label compares with the COMMAND's length, not the pickled entry's."""
    data = pysyncobj_pickle.dumps(entry)
    out = []
    for pos in range(0, len(data), size):
        if pos == 0:
            kind = "start"
        elif pos + size >= len(entry[0]):
            kind = "finish"
        else:
            kind = "process"
        out.append(
            {**message(entry[1] - 1, 1, []), "transmission": kind, "data": data[pos : pos + size]}
        )
        del out[-1]["entries"]
    return out


def test_a_large_entry_with_an_early_finish_label_arrives_whole() -> None:
    # 80,000 bytes >= 0x80 pickle to ~160 KB: chunk 2 of 3 is already labelled 'finish'
    entry = (b"\x00" + "é".encode() * 40_000, 285, 2)
    chunks = pysyncobj_chunks(entry)
    assert [c["transmission"] for c in chunks] == ["start", "finish", "finish"]
    # what pysyncobj's follower did with the first 'finish' (its tick thread died of it)
    with pytest.raises((pickle.UnpicklingError, UnicodeDecodeError, EOFError)):
        pysyncobj_pickle.loads(chunks[0]["data"] + chunks[1]["data"])
    assembler = ChunkAssembler()
    for chunk in chunks:
        assembler.receive("leader", chunk)
    # pysyncobj sees two empty starts (it only acknowledges them), then the entry itself
    assert [(c.get("transmission"), c.get("data")) for c in chunks[:2]] == [("start", b"")] * 2
    last = chunks[2]
    assert "transmission" not in last and "data" not in last
    assert last["entries"] == [entry] and last["prevLogIdx"] == 284
    # now trim_append_entries applies to it: a resend of a held entry truncates nothing
    log = [*log_of(*[1] * 284), entry, (b"n", 286, 2)]
    for chunk in pysyncobj_chunks(entry):
        assembler.receive("leader", chunk)
        trim_append_entries(chunk, log)
    assert (chunk["prevLogIdx"], chunk["entries"]) == (286, [])


def test_chunks_without_their_start_or_of_another_index_are_only_acknowledged() -> None:
    entry = (b"y" * 70_000, 10, 1)
    assembler = ChunkAssembler()
    orphan = pysyncobj_chunks(entry)[1:]  # the start went with a closed connection
    for chunk in orphan:
        assembler.receive("leader", chunk)
        assert (chunk["transmission"], chunk["data"]) == ("start", b"")
    wrong = pysyncobj_chunks(entry)
    for chunk in wrong:
        chunk["prevLogIdx"] = 4  # not entry 10's predecessor: never appended as entry 5
        assembler.receive("leader", chunk)
    assert all(c.get("transmission") == "start" and "entries" not in c for c in wrong)
    # chunks of two senders never mix
    for a, b in zip(pysyncobj_chunks(entry), pysyncobj_chunks((b"z" * 70_000, 10, 1)), strict=True):
        assembler.receive("a", a)
        assembler.receive("b", b)
    assert a["entries"] == [entry] and b["entries"] == [(b"z" * 70_000, 10, 1)]
