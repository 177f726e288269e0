"""Why a DAG did or did not run at a time: "what did the cluster decide for this slot, and why".

Pure: answers from a DAG's committed record, the run on the slot if one is known (the live
state's, else the DB's), the DAG file's import error and ``now``; no clock, no I/O (the API
gathers those, ``api/servicers/explain.py``). It can only see what is kept: skipped ranges are
the newest ``limits.MAX_SKIP_RECORDS`` per DAG, runs go back as far as the DB's oldest run of
the DAG (``history_from``), and the answer says so when a slot is older.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from raftsched.core.limits import MAX_SKIP_RECORDS
from raftsched.core.model import DagRecord, DagRun, DagSpec, ImportErrorRecord, ScheduleKind
from raftsched.core.run_terms import describe as describe_term
from raftsched.core.run_terms import term_of
from raftsched.core.skip_causes import paused_since, span
from raftsched.core.slot_policy import planned_start, runs_left
from raftsched.core.timetable import timetable_for

UNKNOWN_DAG = "unknown_dag"  # never registered: not parsed yet, or no file defines it
IMPORT_ERROR = "import_error"  # unknown, and its file fails to import
INACTIVE = "inactive"  # its file no longer defines it
MANUAL_ONLY = "manual_only"  # schedule=None: slots never exist
NO_SLOT = "no_slot"  # before start_date, or the schedule has no slot at or before the time
AFTER_END = "after_end_date"
CREATED = "created"  # a run exists for the slot
SKIPPED = "skipped"  # a schedule policy skipped it (reason)
NOT_YET_DUE = "not_yet_due"  # the slot, or its jittered start, is in the future
PAUSED = "paused"  # due, not created: the DAG is paused
MAX_RUNS = "max_runs"  # due, not created: the DAG made its max_runs scheduled runs
WAITING = "waiting"  # due, not created yet: active runs at the limit, or the leader is behind
PASSED = "passed"  # the schedule moved past it without a run the cluster still knows of
VERDICTS = (
    UNKNOWN_DAG,
    IMPORT_ERROR,
    INACTIVE,
    MANUAL_ONLY,
    NO_SLOT,
    AFTER_END,
    CREATED,
    SKIPPED,
    NOT_YET_DUE,
    PAUSED,
    MAX_RUNS,
    WAITING,
    PASSED,
)
# A run created this long after its planned start is called late (a leader was unavailable,
# or the cluster was catching up).
LATE = timedelta(seconds=30)


@dataclass(frozen=True, slots=True)
class Explanation:
    verdict: str  # one of VERDICTS
    detail: str  # one line for people
    slot: datetime | None = None  # the slot explained (the last one at or before the time)
    run_id: str = ""


def explain(
    record: DagRecord | None,
    at: datetime,
    now: datetime,
    *,
    run: DagRun | None = None,
    import_error: ImportErrorRecord | None = None,
    history_from: datetime | None = None,
    older_skip: Any = None,
) -> Explanation:
    """What the cluster decided for the DAG's slot at or before ``at``. ``run``: the run on
    that slot if one is known; ``history_from``: the oldest run of the DAG the DB holds;
    ``older_skip``: the DB's skipped range holding the slot (``SkippedSlots``), if any."""
    if record is None:
        if import_error is not None:
            return Explanation(IMPORT_ERROR, f"its file fails to import: {import_error.message}")
        return Explanation(UNKNOWN_DAG, "no such DAG: no parsed file defines it (yet)")
    spec = record.spec
    if spec.schedule.kind is ScheduleKind.NONE:
        return Explanation(MANUAL_ONLY, "schedule=None: it runs only when triggered")
    timetable = timetable_for(spec)
    if timetable.end_date is not None and at > timetable.end_date:
        return Explanation(AFTER_END, f"after its end_date {timetable.end_date.isoformat()}")
    found = timetable.latest_slot(at)
    if found is None:
        start = spec.start_date.isoformat() if spec.start_date else "none"
        return Explanation(NO_SLOT, f"no slot at or before that time (start_date {start})")
    slot = found.logical_date
    where = "" if slot == at else f" (the slot at or before {at.isoformat()})"
    head = f"slot {slot.isoformat()}{where}"
    if run is not None:
        return _created(head, run, spec, slot, record.terms)
    for skipped in (*reversed(record.skipped), *((older_skip,) if older_skip else ())):
        if skipped.first <= slot <= skipped.last:
            where = span(skipped.count, skipped.first, skipped.last)
            return Explanation(
                SKIPPED,
                f"{head}: skipped ({skipped.reason}) with {where},"
                f" decided at {skipped.at.isoformat()}",
                slot,
            )
    last = record.last_logical_date
    if last is not None and slot <= last:
        return Explanation(PASSED, _passed(head, record, slot, history_from), slot)
    start = planned_start(spec, slot)
    if start > now:
        when = f", planned start {start.isoformat()}" if start != slot else ""
        return Explanation(NOT_YET_DUE, f"{head}: not yet due{when}", slot)
    if record.paused:
        note = f": {record.pause_note}" if record.pause_note else ""
        since = paused_since(record.gaps)
        note = f" since {since.isoformat()}{note}" if since is not None else note
        return Explanation(PAUSED, f"{head}: due, not created: the DAG is paused{note}", slot)
    if runs_left(spec, record.scheduled_runs) == 0:
        return Explanation(MAX_RUNS, f"{head}: the DAG made its {spec.max_runs} runs", slot)
    tail = f"; its file fails to import: {import_error.message}" if import_error else ""
    if not record.active:
        return Explanation(INACTIVE, f"{head}: no file defines the DAG any more{tail}", slot)
    return Explanation(
        WAITING,
        f"{head}: due, not created yet (active runs at the DAG's limit, or the leader is"
        f" catching up){tail}",
        slot,
    )


def _created(
    head: str, run: DagRun, spec: DagSpec, slot: datetime, terms: tuple[Any, ...] = ()
) -> Explanation:
    created = run.created_at.isoformat() if run.created_at else "an unknown time"
    late = ""
    if run.created_at is not None and run.run_type.value == "scheduled":
        delay = run.created_at - planned_start(spec, slot)
        if delay > LATE:
            late = f", {int(delay.total_seconds())} s after its start (no leader, or catching up)"
    text = f"{head}: {run.run_type.value} run {run.run_id} created at {created}{late}"
    if terms and run.run_type.value == "scheduled":  # recorded from cluster version 3 on
        text += f", {describe_term(term_of(terms, slot))}"
    return Explanation(CREATED, f"{text}, now {run.state.value}", slot, run.run_id)


def _passed(head: str, record: DagRecord, slot: datetime, history_from: datetime | None) -> str:
    kept = record.skipped[0].first.isoformat() if record.skipped else None
    seen = [f"skipped slots from {kept} (the newest {MAX_SKIP_RECORDS} ranges)"] if kept else []
    if history_from is not None:
        seen.append(f"runs from {history_from.isoformat()}")
    sight = "; the cluster keeps " + " and ".join(seen) if seen else ""
    return f"{head}: the schedule passed it without a run it still knows of{sight}"
