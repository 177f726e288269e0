"""Schedule maths: which slots a DAG has, and which of them are due.

A *slot* is one scheduled run. It fires at its scheduled time, its ``logical_date`` is that
time, and its data interval runs from the previous scheduled time up to it. Pure: no clock
(``now`` is always an argument), no I/O. Every datetime in and out is aware UTC.

Schedules (see ``model.Schedule``):

- ``CRON``: a 5-field expression, or a 6-field one whose LAST field is seconds (croniter's
  convention: ``"* * * * * */10"`` fires every 10 seconds). Evaluated in the DAG's IANA
  time zone, so ``"0 2 * * *"`` in Europe/Berlin fires at 02:00 Berlin wall-clock time all
  year. The first slot's data interval starts at the previous cron time, even if that lies
  before start_date.
- ``INTERVAL``: fixed durations in UTC: slots at ``start_date + k * interval`` (k >= 0), each
  with the data interval ``[logical_date - interval, logical_date]``.
- ``ONCE``: a single slot at start_date (data interval ``[start_date, start_date]``).
- ``NONE``: no slots; manual triggers only.

start_date and end_date bound the slots (both inclusive).

The classes: ``timetable_base`` (slots, bounds, the fixed kinds) and ``timetable_cron`` (cron
expressions, daylight-saving time, and the shared rule memos); this module picks one per
schedule (:func:`from_schedule`) and re-exports them.
"""

from __future__ import annotations

import difflib
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from raftsched.core.model import DagSpec, Schedule, ScheduleKind
from raftsched.core.timetable_base import (
    IntervalTimetable,
    NeverTimetable,
    OnceTimetable,
    Slot,
    Timetable,
)
from raftsched.core.timetable_cron import PRESETS, CronTimetable, check_cron
from raftsched.core.timetable_cron import _CronRule as _CronRule  # tests build a fresh one
from raftsched.core.timetable_dst import DstCronTimetable

__all__ = [
    "PRESETS",
    "CronTimetable",
    "IntervalTimetable",
    "NeverTimetable",
    "OnceTimetable",
    "Slot",
    "Timetable",
    "check_cron",
    "due_slots",
    "from_schedule",
    "get_zone",
    "timetable_for",
]


def get_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; ValueError naming it (and a close match, if any) otherwise."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        pass
    close = difflib.get_close_matches(name, sorted(available_timezones()), n=1)
    hint = f"did you mean {close[0]!r}?" if close else "use an IANA name such as 'Europe/Berlin'"
    raise ValueError(f"unknown time zone {name!r}: {hint}")


def from_schedule(
    schedule: Schedule,
    timezone: str = "UTC",
    start_date: datetime | None = None,
    end_date: datetime | None = None,
) -> Timetable:
    if schedule.kind is ScheduleKind.CRON:
        if not schedule.cron:
            raise ValueError("cron schedule without an expression")
        return CronTimetable(schedule.cron, get_zone(timezone), start_date, end_date)
    if schedule.kind is ScheduleKind.INTERVAL:
        if not schedule.interval_seconds:
            raise ValueError("interval schedule without interval_seconds")
        return IntervalTimetable(timedelta(seconds=schedule.interval_seconds), start_date, end_date)
    if schedule.kind is ScheduleKind.ONCE:
        return OnceTimetable(start_date, end_date)
    return NeverTimetable(start_date, end_date)


def timetable_for(spec: DagSpec) -> Timetable:
    if spec.schedule.kind is ScheduleKind.CRON and (spec.dst_repeated or spec.dst_skipped):
        if not spec.schedule.cron:
            raise ValueError("cron schedule without an expression")
        return DstCronTimetable(
            spec.schedule.cron,
            get_zone(spec.timezone),
            spec.start_date,
            spec.end_date,
            repeated=spec.dst_repeated,
            skipped=spec.dst_skipped,
        )
    return from_schedule(spec.schedule, spec.timezone, spec.start_date, spec.end_date)


def due_slots(
    spec: DagSpec, *, last_logical_date: datetime | None, now: datetime, limit: int
) -> list[Slot]:
    """The slots of ``spec`` to create at ``now`` (see ``Timetable.due``)."""
    return timetable_for(spec).due(
        last_logical_date=last_logical_date, now=now, limit=limit, catchup=spec.catchup
    )
