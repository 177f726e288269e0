"""A follower keeps the entries it already holds: trim_append_entries (Raft §5.3)."""

from __future__ import annotations

from typing import Any

from raftsched.cluster.append_entries import term_at, trim_append_entries


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
