"""Schedule policies: which due slots of a DAG become runs and which are skipped, and why.

Pure (no clock: ``now`` is an argument). The leader calls :func:`plan` for a DAG whose next
slot is due and proposes its answer as one ordered list of ``RunDecision``: a skip decision
(``skip_reason`` set) covers a range of consecutive slots and moves the DAG's schedule past
them; apply re-checks each one (``handlers_runs``), so a deposed leader's plan is harmless.

Policies (a DAG's ``overlap``, ``catchup``, ``catchup_window_seconds``, ``max_runs``):

- ``allow_all`` (``""``, the default): up to max_active_runs runs at once; due slots wait.
- ``skip``: one run at a time; a slot due while a run is active is skipped ("overlap").
- ``buffer_one``: one run at a time; while it runs, the newest due slot waits and older ones
  are skipped ("overlap"). Temporal keeps the *oldest* buffered start; the schedule here only
  moves forward, so the slot kept is the newest (the freshest data interval).
- ``buffer_all``: one run at a time; every due slot waits, at most
  ``limits.MAX_BUFFERED_RUNS``; older ones past that are skipped ("buffer_full").
- ``cancel_other``: a slot due while a run is active cancels that run (its tasks not started
  fail, a running attempt ends without a retry, ``core/run_ending.py``) and waits for it to
  end, then runs; older slots due meanwhile are skipped ("overlap").
- ``terminate_other``: a slot due while a run is active kills that run's attempts through
  their leases and starts now, in the same committed entry.
- catch-up: ``catchup=False`` runs only the latest missed slot and records the rest
  ("catchup"); ``catchup_window_seconds`` runs the missed slots not older than the window and
  records the older ones ("catchup_window"); ``catchup=True`` without a window runs all.
- ``jitter_seconds``: each slot's run starts at its *planned start*, the logical date plus a
  delay in [0, jitter] derived from the DAG id and the slot (:func:`planned_start`: every
  replica computes the same, no randomness in the state). Overlap and catch-up decisions are
  taken at the slot's logical date; only the start of a run waits.
- ``max_runs``: after that many scheduled runs the DAG schedules nothing (manual runs still
  work), as Temporal's limited actions.

Skips are recorded only when ``record_skips`` (the cluster runs a release that knows skip
decisions, ``versions``) or the DAG sets a policy field; otherwise :func:`plan` is exactly
the previous release's ``Timetable.due``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from raftsched.core import limits as lim
from raftsched.core.commands import RunDecision
from raftsched.core.model import DagSpec, RunType, parse_utc, utc_iso
from raftsched.core.skip_causes import CAUSES, Gap, cause_refusal, split
from raftsched.core.timetable_base import IntervalTimetable, Slot, Timetable

ALLOW_ALL = "allow_all"
SKIP = "skip"
BUFFER_ONE = "buffer_one"
BUFFER_ALL = "buffer_all"
CANCEL_OTHER = "cancel_other"
TERMINATE_OTHER = "terminate_other"
OVERLAP_POLICIES = ("", ALLOW_ALL, SKIP, BUFFER_ONE, BUFFER_ALL, CANCEL_OTHER, TERMINATE_OTHER)
ONE_AT_A_TIME = frozenset({SKIP, BUFFER_ONE, BUFFER_ALL, CANCEL_OTHER, TERMINATE_OTHER})
# the newest due slot is the one that matters; older ones due meanwhile are skipped
NEWEST_WINS = frozenset({BUFFER_ONE, CANCEL_OTHER, TERMINATE_OTHER})
_ENDING = {CANCEL_OTHER: "cancel", TERMINATE_OTHER: "terminate"}  # run_ending's

# Why slots got no run (RunDecision.skip_reason, SkippedSlots.reason)
SKIP_OVERLAP = "overlap"
SKIP_BUFFER_FULL = "buffer_full"
SKIP_CATCHUP = "catchup"
SKIP_CATCHUP_WINDOW = "catchup_window"
# and why a catch-up skip's slots were missed (skip_causes): not parsed, paused, no leader
SKIP_REASONS = frozenset(
    {SKIP_OVERLAP, SKIP_BUFFER_FULL, SKIP_CATCHUP, SKIP_CATCHUP_WINDOW, *CAUSES}
)

_TICK = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class SkippedSlots:
    """Consecutive schedule slots ``first``..``last`` (logical dates) that got no run, and why
    (a ``slot_policy.SKIP_*`` reason), decided at ``at``. ``count``: how many slots (0: not
    counted, a long gap whose slots were never enumerated)."""

    first: datetime
    last: datetime
    count: int
    reason: str
    at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "first": utc_iso(self.first),
            "last": utc_iso(self.last),
            "count": self.count,
            "reason": self.reason,
            "at": utc_iso(self.at),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SkippedSlots:
        first, last, at = (parse_utc(data[k]) for k in ("first", "last", "at"))
        assert first is not None and last is not None and at is not None
        return cls(first, last, int(data["count"]), str(data["reason"]), at)


def uses_policies(spec: DagSpec) -> bool:
    """Does ``spec`` set a field of this module (it then records its skips anyway)?"""
    return bool(spec.overlap) or any(
        value is not None
        for value in (spec.catchup_window_seconds, spec.max_runs, spec.jitter_seconds)
    )


def planned_start(spec: DagSpec, logical_date: datetime) -> datetime:
    """When the run of the slot at ``logical_date`` starts: the slot plus the DAG's jitter
    for it, a delay in [0, jitter_seconds] (whole microseconds) from a hash of the DAG id and
    the slot, so the same on every node and across restarts."""
    if not spec.jitter_seconds:
        return logical_date
    span = int(spec.jitter_seconds * 1_000_000)
    text = f"{spec.dag_id}\n{utc_iso(logical_date)}".encode()
    draw = int.from_bytes(hashlib.sha256(text).digest()[:8], "big")
    return logical_date + timedelta(microseconds=draw % (span + 1))


def max_active(spec: DagSpec) -> int:
    """Runs the DAG may have active at once for its scheduled runs."""
    return 1 if spec.overlap in ONE_AT_A_TIME else spec.max_active_runs


def runs_left(spec: DagSpec, scheduled_runs: int) -> int | None:
    """Scheduled runs the DAG may still make (None: no limit)."""
    return None if spec.max_runs is None else max(0, spec.max_runs - scheduled_runs)


def plan(
    spec: DagSpec,
    timetable: Timetable,
    *,
    last: datetime | None,
    now: datetime,
    room: int,
    limit: int,
    scheduled_runs: int = 0,
    record_skips: bool = False,
    cancel_sent: bool = False,
    gaps: tuple[Gap, ...] = (),
) -> list[RunDecision]:
    """The decisions for ``spec`` at ``now``: skips (oldest first) then runs, in slot order.

    ``last``: the logical date of its latest scheduled run or skip; ``room``: runs it may
    start now (``max_active`` minus its active runs, bounded by the caller); ``limit``: at
    most this many decisions; ``cancel_sent``: a cancel of the active run for the newest slot
    was committed (it is not proposed again); ``gaps``: why slots were missed (the DAG's
    ``skip_causes.Gap`` records and the leader's leaderless stretch), to label catch-up skips."""
    left = runs_left(spec, scheduled_runs)
    if left is not None:
        room = min(room, left)
        if left == 0:
            return []
    if limit <= 0:
        return []
    if not (record_skips or uses_policies(spec)):
        slots = timetable.due(last_logical_date=last, now=now, limit=room, catchup=spec.catchup)
        return [_run(spec, s) for s in slots]
    latest = timetable.latest_slot(now)
    # no start_date and no run yet: nothing to catch up, the latest slot is the first
    first = timetable.next_slot(last) if last is not None or timetable.start_date else latest
    if latest is None or first is None or first.logical_date > latest.logical_date:
        return []
    out: list[RunDecision] = []
    # 1. catch-up: slots too old to run
    keep_from = _catchup_start(spec, latest, now, last=last, room=room)
    if keep_from is not None and first.logical_date < keep_from:
        before = timetable.latest_slot(keep_from - _TICK)
        if before is None:  # cannot be (first is such a slot): plan nothing rather than raise
            return []
        reason = SKIP_CATCHUP if spec.catchup_window_seconds is None else SKIP_CATCHUP_WINDOW
        out.extend(_caught_up(spec, timetable, first, before, reason, gaps))
        first = timetable.next_slot(before.logical_date)
        if first is None or first.logical_date > latest.logical_date:
            return out[:limit]  # every due slot is too old (a window shorter than the period)
    # 2. overlap: what the active run(s) leave
    policy = spec.overlap or ALLOW_ALL
    if policy == SKIP and room <= 0:
        out.append(_skip(spec, first, latest, _count(timetable, first, latest), SKIP_OVERLAP))
    elif policy in NEWEST_WINS and (first.logical_date < latest.logical_date or room <= 0):
        if first.logical_date < latest.logical_date:
            before = timetable.latest_slot(latest.logical_date - _TICK)
            if before is None:
                return out[:limit]
            out.append(_skip(spec, first, before, _count(timetable, first, before), SKIP_OVERLAP))
        if room > 0:
            out.append(_run(spec, latest))
        elif policy in _ENDING and not (cancel_sent and policy == CANCEL_OTHER):
            out.append(replace(_run(spec, latest), end_active=_ENDING[policy]))
    elif policy == BUFFER_ALL and room <= 0:
        oldest_kept = _buffer_start(timetable, first, latest)
        if oldest_kept is not None:
            before = timetable.latest_slot(oldest_kept - _TICK)
            if before is None:
                return out[:limit]
            out.append(_skip(spec, first, before, 0, SKIP_BUFFER_FULL))
    elif room > 0:
        slots = timetable.slots_between(
            first.logical_date - _TICK, now, min(room, limit - len(out))
        )
        out.extend(_run(spec, s) for s in slots)
    if spec.jitter_seconds:  # a run waits for its planned start, and the runs after it too
        waiting = [d.skip_reason == "" and planned_start(spec, d.logical_date) > now for d in out]
        if True in waiting:
            out = out[: waiting.index(True)]
    return out[:limit]


def skip_refusal(
    spec: DagSpec,
    reason: str,
    last: datetime,
    now: datetime,
    active: int,
    *,
    first: datetime | None = None,
    gaps: tuple[Gap, ...] = (),
) -> str:
    """Why apply refuses to skip slots up to ``last`` for ``reason`` ("" : it may). Checked
    against the committed spec, so a plan made from an older spec is not applied. A cause
    (``skip_causes``) needs the catch-up policy to drop the slots and, for ``paused`` and
    ``not_parsed``, a committed gap of the DAG holding them."""
    policy = spec.overlap or ALLOW_ALL
    if reason in CAUSES:
        caught = SKIP_CATCHUP if spec.catchup_window_seconds is None else SKIP_CATCHUP_WINDOW
        return skip_refusal(spec, caught, last, now, active) or cause_refusal(
            gaps, reason, last if first is None else first, last
        )
    if reason == SKIP_OVERLAP:
        if (policy == SKIP and active > 0) or policy in NEWEST_WINS:
            return ""
        return f"overlap policy {policy!r} skips no slot while {active} runs are active"
    if reason == SKIP_BUFFER_FULL:
        return "" if policy == BUFFER_ALL and active > 0 else f"overlap policy {policy!r}"
    if reason == SKIP_CATCHUP_WINDOW:
        window = spec.catchup_window_seconds
        if window is not None and last < now - timedelta(seconds=window):
            return ""
        return "the slots are inside the DAG's catch-up window"
    if reason == SKIP_CATCHUP:
        if not spec.catchup and spec.catchup_window_seconds is None:
            return ""
        return "the DAG catches up"
    return f"unknown skip reason {reason!r}"


def ending_refusal(spec: DagSpec, how: str, scheduled: bool) -> str:
    """Why apply refuses a decision that ends the active runs ("": it may)."""
    if scheduled and _ENDING.get(spec.overlap) == how:
        return ""
    return f"overlap policy {spec.overlap or ALLOW_ALL!r} does not {how} active runs"


def record_skip(
    kept: tuple[SkippedSlots, ...],
    first: datetime,
    last: datetime,
    count: int,
    reason: str,
    at: datetime,
) -> tuple[SkippedSlots, ...]:
    """``kept`` with the range first..last added, the newest MAX_SKIP_RECORDS kept."""
    return (*kept, SkippedSlots(first, last, count, reason, at))[-lim.MAX_SKIP_RECORDS :]


def _catchup_start(
    spec: DagSpec, latest: Slot, now: datetime, *, last: datetime | None, room: int
) -> datetime | None:
    """The oldest logical date a missed slot may have and still run (None: any). While a
    one-at-a-time policy's run is active, what piles up is the overlap policy's to decide;
    and the buffers keep their slots under catchup=False once the DAG has run (set
    catchup_window to drop old ones after downtime)."""
    policy = spec.overlap
    if room <= 0 and policy in ONE_AT_A_TIME:
        return None
    if spec.catchup_window_seconds is not None:
        return now - timedelta(seconds=spec.catchup_window_seconds)
    if spec.catchup or (policy in (BUFFER_ONE, BUFFER_ALL) and last is not None):
        return None
    return latest.logical_date


def _buffer_start(timetable: Timetable, first: Slot, latest: Slot) -> datetime | None:
    """The oldest of the newest MAX_BUFFERED_RUNS slots first..latest, when older ones exist
    (they do not fit the buffer); None when all fit. Walks at most MAX_BUFFERED_RUNS slots."""
    when = latest.logical_date
    for _ in range(lim.MAX_BUFFERED_RUNS - 1):
        if when <= first.logical_date:
            return None
        slot = timetable.latest_slot(when - _TICK)
        if slot is None:
            return None
        when = slot.logical_date
    return when if first.logical_date < when else None


def _caught_up(
    spec: DagSpec,
    timetable: Timetable,
    first: Slot,
    last: Slot,
    reason: str,
    gaps: tuple[Gap, ...],
) -> list[RunDecision]:
    """The catch-up skip of slots first..last, one decision per cause (``skip_causes.split``:
    a handful however long the range, each counted when that is cheap)."""
    out = []
    for a, b, label in split(first.logical_date, last.logical_date, reason, gaps):
        lo, hi = timetable.next_slot(a - _TICK), timetable.latest_slot(b)
        if lo is not None and hi is not None and lo.logical_date <= hi.logical_date:
            out.append(_skip(spec, lo, hi, _count(timetable, lo, hi), label))
    return out


def _run(spec: DagSpec, slot: Slot) -> RunDecision:
    return RunDecision(
        dag_id=spec.dag_id,
        logical_date=slot.logical_date,
        data_interval_start=slot.data_interval_start,
        data_interval_end=slot.data_interval_end,
        run_type=RunType.SCHEDULED,
    )


def _count(timetable: Timetable, first: Slot, last: Slot) -> int:
    """How many slots first..last are, when at most MAX_COUNTED (0: more, not counted): a
    range skipped while a run is active is short, a catch-up gap may be years of slots. A
    fixed interval is counted by arithmetic, however many."""
    if isinstance(timetable, IntervalTimetable):
        return min(
            lim.MAX_RUNS_LIMIT, (last.logical_date - first.logical_date) // timetable.interval + 1
        )
    slots = timetable.slots_between(first.logical_date - _TICK, last.logical_date, _MAX_COUNTED)
    return len(slots) if slots and slots[-1].logical_date == last.logical_date else 0


_MAX_COUNTED = 100


def _skip(spec: DagSpec, first: Slot, last: Slot, count: int, reason: str) -> RunDecision:
    """Slots first..last skipped: the decision's interval names their logical dates."""
    return RunDecision(
        dag_id=spec.dag_id,
        logical_date=last.logical_date,
        data_interval_start=first.logical_date,
        data_interval_end=last.logical_date,
        run_type=RunType.SCHEDULED,
        skip_reason=reason,
        skipped_slots=count,
    )
