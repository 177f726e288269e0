"""Why missed slots were missed: the DAG was paused, not parsed yet, or no leader was there.

A catch-up skip (``slot_policy``: ``catchup=False`` drops missed slots but the latest, a
catch-up window drops those older than the window) says which slots the policy drops; this
module says *why they were missed* in the first place, from committed facts, and splits the
range by cause (precedence: not parsed, then paused, then leader unavailable; the rest keeps
the policy's reason). ``catchup=True`` drops nothing, so nothing here applies: missed slots run,
as in Airflow (Temporal drops the actions a paused schedule misses; we keep Airflow's
catch-up, since ``catchup=True`` users expect the backlog after an unpause).

Facts, all bounded:

- ``Gap`` records on the DAG (``DagRecord.gaps``, the newest ``MAX_GAPS``): ``not_parsed``
  from the beginning to the commit of the DAG's first spec (its ``start_date`` may lie
  earlier), ``paused`` from a pause to the unpause. Written by apply from the cluster version
  that introduced them (``SINCE_RELEASE``), so older states digest as before.
- The leader's own leaderless stretch (``leader_gap``): from the state's clock (the newest
  committed command time) when a new leader took over to its first commit. apply cannot see
  an absence, so it re-checks only that the policy drops the slots; the label is the
  leader's observation (a quiet cluster whose leader died counts as unavailable from its
  last commit on).

Pure: no clock, no I/O. A range stays one record per cause however many slots it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from raftsched.core.model import parse_utc, utc_iso

SKIP_NOT_PARSED = "not_parsed"
SKIP_PAUSED = "paused"
SKIP_LEADER = "leader_unavailable"
CAUSES = (SKIP_NOT_PARSED, SKIP_PAUSED, SKIP_LEADER)  # precedence, strongest first
SINCE_RELEASE = 3  # the release (0.3.0) that records gaps: a fixed fact, not versions.RELEASE
MAX_GAPS = 8  # gaps a DAG record keeps (the newest); older ones fall back to the policy reason
# A new leader's leaderless stretch shorter than this is an election, not an outage
LEADER_GAP_TOLERANCE = timedelta(seconds=5)
_TICK = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Gap:
    """A stretch ``start``..``end`` (None: open) in which the DAG's slots could not run."""

    cause: str
    start: datetime | None
    end: datetime | None

    def to_dict(self) -> dict[str, Any]:
        at = {k: utc_iso(v) for k, v in (("start", self.start), ("end", self.end)) if v}
        return {"cause": self.cause, **at}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Gap:
        return cls(str(data["cause"]), parse_utc(data.get("start")), parse_utc(data.get("end")))


def records_gaps(cluster_version: int) -> bool:
    return cluster_version >= SINCE_RELEASE


def registered(cluster_version: int, now: datetime) -> tuple[Gap, ...]:
    """The gaps of a DAG whose first spec commits at ``now``."""
    return (Gap(SKIP_NOT_PARSED, None, now),) if records_gaps(cluster_version) else ()


def paused_changed(
    gaps: tuple[Gap, ...], paused: bool, now: datetime, cluster_version: int
) -> tuple[Gap, ...]:
    """``gaps`` after the DAG was paused (a gap opens) or unpaused (the open one closes)."""
    if not records_gaps(cluster_version):
        return gaps
    if paused:
        if any(g.cause == SKIP_PAUSED and g.end is None for g in gaps):
            return gaps
        return (*gaps, Gap(SKIP_PAUSED, now, None))[-MAX_GAPS:]
    return tuple(replace(g, end=now) if g.end is None else g for g in gaps)


def leader_gap(clock: datetime, first_commit: datetime) -> Gap | None:
    """A new leader's leaderless stretch: the state's clock when it took over (the newest
    committed command time) to its first commit; None when within the tolerance."""
    if first_commit - clock <= LEADER_GAP_TOLERANCE:
        return None
    return Gap(SKIP_LEADER, clock, first_commit)


def split(
    first: datetime, last: datetime, reason: str, gaps: tuple[Gap, ...]
) -> list[tuple[datetime, datetime, str]]:
    """The time stretch ``first``..``last`` cut into consecutive pieces (closed, whole
    microseconds apart), each labelled with its strongest cause, or ``reason``. At most
    ``3 * len(gaps) + 1`` pieces, adjacent ones with the same label merged."""
    pieces = [(first, last, reason)]
    for cause in reversed(CAUSES):  # the strongest is painted last and wins
        for gap in gaps:
            if gap.cause == cause:
                pieces = _paint(pieces, gap, cause)
    merged: list[tuple[datetime, datetime, str]] = []
    for a, b, label in pieces:
        if merged and merged[-1][2] == label and merged[-1][1] + _TICK == a:
            merged[-1] = (merged[-1][0], b, label)
        else:
            merged.append((a, b, label))
    return merged


def _paint(
    pieces: list[tuple[datetime, datetime, str]], gap: Gap, cause: str
) -> list[tuple[datetime, datetime, str]]:
    out: list[tuple[datetime, datetime, str]] = []
    for a, b, label in pieces:
        lo = a if gap.start is None else max(a, gap.start)
        hi = b if gap.end is None else min(b, gap.end)
        if lo > hi:
            out.append((a, b, label))
            continue
        if a < lo:
            out.append((a, lo - _TICK, label))
        out.append((lo, hi, cause))
        if hi < b:
            out.append((hi + _TICK, b, label))
    return out


def cause_refusal(gaps: tuple[Gap, ...], reason: str, first: datetime, last: datetime) -> str:
    """Why apply refuses a ``paused`` or ``not_parsed`` skip of first..last ("": it may):
    the range must lie inside a committed gap of that cause (a leader's ``leader_unavailable``
    is not checked here: see the module doc)."""
    if reason == SKIP_LEADER:
        return ""
    for gap in gaps:
        inside = (gap.start is None or gap.start <= first) and (gap.end is None or last <= gap.end)
        if gap.cause == reason and inside:
            return ""
    return f"no committed {reason} stretch holds the slots"


def span(count: int, first: datetime, last: datetime) -> str:
    """A skipped range in words: "525,600 slots from X to Y" (count 0: not counted)."""
    if first == last:
        return f"the slot {first.isoformat()}"
    many = f"{count:,} slots" if count else "slots"
    return f"{many} from {first.isoformat()} to {last.isoformat()}"


def describe(reason: str, count: int, first: datetime, last: datetime) -> str:
    """One line for a skipped range: "paused: 525,600 slots from X to Y"."""
    return f"{reason}: {span(count, first, last)}"


def paused_since(gaps: tuple[Gap, ...]) -> datetime | None:
    """When the DAG's current pause began, if recorded."""
    return next((g.start for g in gaps if g.cause == SKIP_PAUSED and g.end is None), None)
