"""The timetable classes every schedule kind shares: slots, bounds, and the fixed kinds.

:class:`Timetable` turns "the first fire time after t" / "the last at or before t" (what a
subclass provides) into slots bounded by start_date and end_date; :class:`NeverTimetable`,
:class:`OnceTimetable` and :class:`IntervalTimetable` are the schedule kinds without a cron
expression (``timetable_cron`` has the cron one; ``timetable`` picks one per schedule). Pure:
no clock (``now`` is always an argument), no I/O. Every datetime in and out is aware UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Slot:
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime


def _check_aware(value: datetime | None, what: str) -> None:
    if value is not None and value.tzinfo is None:
        raise ValueError(f"naive datetime for {what}: pass an aware UTC datetime")


class Timetable:
    """The slots of one schedule, bounded by start and end (aware datetimes, inclusive)."""

    def __init__(self, start_date: datetime | None, end_date: datetime | None) -> None:
        _check_aware(start_date, "start_date")
        _check_aware(end_date, "end_date")
        self.start_date = start_date.astimezone(UTC) if start_date else None
        self.end_date = end_date.astimezone(UTC) if end_date else None

    # -- what subclasses provide (ignoring start/end bounds) ----------------------------------
    def _after(self, when: datetime) -> datetime | None:
        """The first fire time strictly after ``when``."""
        raise NotImplementedError

    def _at_or_before(self, when: datetime) -> datetime | None:
        """The last fire time at or before ``when``."""
        raise NotImplementedError

    def _interval_start(self, logical_date: datetime) -> datetime:
        raise NotImplementedError

    # -- public ------------------------------------------------------------------------------
    def slot_at(self, logical_date: datetime) -> Slot:
        return Slot(logical_date, self._interval_start(logical_date), logical_date)

    def next_slot(self, after: datetime | None) -> Slot | None:
        """The first slot strictly after ``after`` (None: the first slot from start_date)."""
        when = self.next_time(after)
        return None if when is None else self.slot_at(when)

    def next_time(self, after: datetime | None) -> datetime | None:
        """``next_slot(after).logical_date``, without computing the data interval."""
        _check_aware(after, "after")
        if after is None or (self.start_date is not None and after < self.start_date):
            if self.start_date is None:
                return None
            # Whole seconds back, then forward: float timestamps inside croniter cannot be
            # trusted with a microsecond.
            when = self._after(self.start_date - _SECOND)
            while when is not None and when < self.start_date:
                when = self._after(when)
        else:
            when = self._after(after.astimezone(UTC))
        if when is None or (self.end_date is not None and when > self.end_date):
            return None
        return when

    def latest_slot(self, until: datetime) -> Slot | None:
        """The last slot at or before ``until`` (bounded by start and end)."""
        _check_aware(until, "until")
        until = until.astimezone(UTC)
        if self.end_date is not None and until > self.end_date:
            until = self.end_date
        when = self._at_or_before(until)
        if when is None or (self.start_date is not None and when < self.start_date):
            return None
        return self.slot_at(when)

    def slots_between(self, after: datetime | None, until: datetime, limit: int) -> list[Slot]:
        """Up to ``limit`` slots with after < logical_date <= until, in order."""
        slots: list[Slot] = []
        slot = self.next_slot(after)
        while slot is not None and len(slots) < limit and slot.logical_date <= until:
            slots.append(slot)
            slot = self.next_slot(slot.logical_date)
        return slots

    def due(
        self, *, last_logical_date: datetime | None, now: datetime, limit: int, catchup: bool
    ) -> list[Slot]:
        """Slots to create now, in order, after the DAG's last scheduled ``last_logical_date``.

        catchup=True: every missed slot, oldest first, at most ``limit``. catchup=False (or no
        start_date to catch up from): only the latest slot at or before ``now``.
        """
        if limit <= 0:
            return []
        if catchup and (self.start_date is not None or last_logical_date is not None):
            return self.slots_between(last_logical_date, now, limit)
        latest = self.latest_slot(now)
        if latest is None:
            return []
        if last_logical_date is not None and latest.logical_date <= last_logical_date:
            return []
        return [latest]


class NeverTimetable(Timetable):
    """``schedule=None``: manual runs only."""

    def _after(self, when: datetime) -> datetime | None:
        return None

    def _at_or_before(self, when: datetime) -> datetime | None:
        return None

    def _interval_start(self, logical_date: datetime) -> datetime:
        return logical_date


class OnceTimetable(Timetable):
    """``@once``: one slot at start_date."""

    def _after(self, when: datetime) -> datetime | None:
        start = self.start_date
        return start if start is not None and start > when else None

    def _at_or_before(self, when: datetime) -> datetime | None:
        start = self.start_date
        return start if start is not None and start <= when else None

    def _interval_start(self, logical_date: datetime) -> datetime:
        return logical_date


class IntervalTimetable(Timetable):
    """A fixed period in UTC from start_date (required)."""

    def __init__(
        self, interval: timedelta, start_date: datetime | None, end_date: datetime | None = None
    ) -> None:
        super().__init__(start_date, end_date)
        if interval <= timedelta(0):
            raise ValueError(f"interval must be positive, got {interval}")
        self.interval = interval

    def _after(self, when: datetime) -> datetime | None:
        start = self.start_date
        if start is None:
            return None
        if when < start:
            return start
        return start + ((when - start) // self.interval + 1) * self.interval

    def _at_or_before(self, when: datetime) -> datetime | None:
        start = self.start_date
        if start is None or when < start:
            return None
        return start + ((when - start) // self.interval) * self.interval

    def _interval_start(self, logical_date: datetime) -> datetime:
        return logical_date - self.interval
