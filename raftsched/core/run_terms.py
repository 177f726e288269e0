"""Which leader term created a DAG's scheduled runs, for ``dags explain``.

The leader stamps its ``CreateRuns`` with ``(term, leader id)`` (``CreateRuns.leader``, an
added field set only from cluster version 3: the gate refuses it before). Scheduled runs are
created in slot order, so a DAG keeps one ``TermStart`` per term that created its runs — the
first slot that term created — and the term of any scheduled run is the newest record at or
before its slot. The newest ``MAX_TERM_RECORDS`` are kept (``DagRecord.terms``): a DAG whose
leaders changed a thousand times answers for its recent runs, and says so for older ones. It
survives the run's eviction from memory (the DB's run rows do not carry it). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from raftsched.core.model import parse_utc, utc_iso
from raftsched.errors import LimitExceeded

SINCE_RELEASE = 3  # the release (0.3.0) that knows CreateRuns.leader: a fixed fact
MAX_TERM_RECORDS = 20
MAX_LEADER_ID_CHARS = 200
MAX_TERM = 2**62


@dataclass(frozen=True, slots=True)
class TermStart:
    """Leader ``leader`` in Raft term ``term`` created the DAG's scheduled runs from ``first``
    (a logical date) on, until the next record."""

    first: datetime
    term: int
    leader: str

    def to_dict(self) -> dict[str, Any]:
        return {"first": utc_iso(self.first), "term": self.term, "leader": self.leader}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TermStart:
        first = parse_utc(data["first"])
        assert first is not None
        return cls(first, int(data["term"]), str(data["leader"]))


def check_leader(value: object) -> None:
    """``CreateRuns.leader``: () or (term >= 1, printable leader id)."""
    if value == ():
        return
    if not isinstance(value, tuple) or len(value) != 2:
        raise LimitExceeded("leader", "must be (term, leader id)")
    term, leader = value
    if type(term) is not int or not 1 <= term <= MAX_TERM:
        raise LimitExceeded("leader.term", f"must be an integer in 1..{MAX_TERM}")
    if not isinstance(leader, str) or len(leader) > MAX_LEADER_ID_CHARS:
        raise LimitExceeded("leader.id", f"a text of at most {MAX_LEADER_ID_CHARS} characters")
    if not leader.isprintable():
        raise LimitExceeded("leader.id", "printable characters only")


def noted(terms: tuple[Any, ...], leader: tuple[Any, ...], slot: datetime) -> tuple[Any, ...]:
    """``terms`` after a scheduled run at ``slot`` was created by ``leader`` (unchanged when
    that term already holds the newest record, or the command carries no leader)."""
    if not leader:
        return terms
    term, leader_id = leader
    if terms and terms[-1].term == term and terms[-1].leader == leader_id:
        return terms
    return (*terms, TermStart(slot, term, leader_id))[-MAX_TERM_RECORDS:]


def term_of(terms: tuple[Any, ...], slot: datetime) -> TermStart | None:
    """The record of the term that created the scheduled run at ``slot`` (None: older than
    what the DAG keeps, or created before terms were recorded)."""
    found = None
    for record in terms:
        if record.first <= slot:
            found = record
    return found


def describe(record: TermStart | None) -> str:
    if record is None:
        return "by a leader term no longer kept"
    who = f" (leader {record.leader})" if record.leader else ""
    return f"by leader term {record.term}{who}"
