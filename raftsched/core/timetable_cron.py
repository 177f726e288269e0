"""Cron schedules: a cron expression evaluated in an IANA time zone.

Daylight-saving time, for cron schedules (decided here, tested in tests/unit/test_timetable.py):

- A cron whose hour field covers every hour (``*``) fires by real elapsed time: in the hour
  that repeats on the fall-back day it fires at both occurrences (an hourly DAG has 25 runs
  that day), and it skips wall-clock times that do not exist on the spring-forward day (23).
- A cron with fixed hours (``"0 2 * * *"``, ``"*/20 2 * * *"``, ``"0 */2 * * *"``) fires each
  wall-clock time at most once a day: on the fall-back day only the FIRST occurrence of a
  repeated time fires (like Vixie cron); a time inside the spring-forward gap fires once, at
  the first instant after the gap (``"30 2 * * *"`` in Europe/Berlin on 2024-03-31 fires at
  03:00 CEST = 01:00 UTC). Several gap times collapse into that one slot, never duplicates.

Slots are strictly increasing in UTC, so a (dag_id, logical_date) pair is never produced twice.

Cost (100,000 DAGs on a leader): every timetable with the same expression and zone shares one
``_CronRule``: croniter's expansion of the expression (~70 us) is done once, and the answers of
"first fire strictly after t" / "last fire strictly before t" are memoized per rule. Those
answers are pure functions of (expression, zone, t), so sharing them changes no result, only
the cost: DAGs with one schedule come due at the same instants, and a tick asks every due DAG
about the same ``now``. Each query on a memo miss runs on its own copy of the rule's croniter
(croniter objects keep the last answer inside them), so timetables may be used from several
threads; a memo is a plain dict whose entries never change once written.
"""

from __future__ import annotations

import copy
import functools
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

from croniter import CroniterBadDateError, CroniterError, croniter

from raftsched.core.timetable_base import Timetable

PRESETS: dict[str, str] = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

_SECOND = timedelta(seconds=1)
_MEMO_MAX = 65_536  # answers kept per rule; the memo starts afresh when full
_MISS = object()
# Offset changes are looked for at this step, then pinned to the second. Zones change offset
# at most a few times a year, never twice within it.
_OFFSET_SCAN_STEP = timedelta(hours=12)
_MAX_STRETCHES = 64  # offset changes crossed by one search (a cron firing once in years)


@functools.lru_cache(maxsize=1024)
def check_cron(expression: str) -> str:
    """Validate a cron expression; return it normalized (single spaces).

    Raises ValueError with a reason a person can act on (the expression and croniter's reason).
    """
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise ValueError(
            f"invalid cron expression {expression!r}: expected 5 fields (minute hour day month"
            f" weekday) or 6 with seconds last, got {len(fields)}"
        )
    normalized = " ".join(fields)
    try:
        probe = croniter(normalized, datetime(2000, 1, 1, tzinfo=UTC))
        probe.get_next(datetime)
    except CroniterBadDateError:
        raise ValueError(
            f"invalid cron expression {expression!r}: it never matches a date"
        ) from None
    except (CroniterError, TypeError, KeyError) as err:
        raise ValueError(f"invalid cron expression {expression!r}: {err}") from None
    return normalized


class CronTimetable(Timetable):
    """A cron expression evaluated in an IANA time zone (DST rules in the module docstring)."""

    def __init__(
        self,
        expression: str,
        zone: tzinfo,
        start_date: datetime | None = None,
        end_date: datetime | None = None,
    ) -> None:
        super().__init__(start_date, end_date)
        self.expression = check_cron(PRESETS.get(expression.strip().lower(), expression))
        self.zone = zone
        self._rule = _cron_rule(self.expression, zone)
        self.every_hour = self._rule.every_hour

    def _is_repeat(self, local: datetime) -> bool:
        """True for the second occurrence of a wall-clock time repeated at a fall-back."""
        if self.every_hour or local.fold == 0:
            return False
        return local.replace(fold=0).utcoffset() != local.utcoffset()

    def _after(self, when: datetime) -> datetime | None:
        memo = self._rule.after
        found = memo.get(when, _MISS)
        if found is _MISS:
            found = self._after_elapsed(when) if self.every_hour else self._after_wall(when)
            _remember(memo, when, found)
        return found  # type: ignore[return-value]

    def _after_wall(self, when: datetime) -> datetime | None:
        current = when.astimezone(self.zone)
        cron = self._rule.iterator()
        try:
            while True:
                local = cron.get_next(datetime, start_time=current)
                if not self._is_repeat(local):
                    return local.astimezone(UTC)
                current = local
        except CroniterBadDateError:
            return None

    def _after_elapsed(self, when: datetime) -> datetime | None:
        """Real elapsed time (every-hour crons): evaluate the cron in the fixed UTC offset in
        force, one stretch between two offset changes at a time. croniter, evaluating in the
        zone itself, misses the second pass through a repeated half hour (Lord Howe Island
        falls back 30 minutes); a fixed offset has no repeated or skipped wall-clock time."""
        start = when.astimezone(UTC)  # candidates are strictly after start
        offset = start.astimezone(self.zone).utcoffset()
        cron = self._rule.iterator()
        for _ in range(_MAX_STRETCHES):
            fixed = timezone(offset)  # type: ignore[arg-type]
            try:
                local = cron.get_next(datetime, start_time=start.astimezone(fixed))
            except CroniterBadDateError:
                return None
            found = local.astimezone(UTC)
            change = self._first_offset_change(start, found, offset)
            if change is None:
                return found
            # The next stretch: from the change on, in the offset that starts there.
            start, offset = change - _SECOND, change.astimezone(self.zone).utcoffset()
        return None

    def _first_offset_change(
        self, start: datetime, end: datetime, offset: timedelta | None
    ) -> datetime | None:
        """The first whole second in (start, end] whose UTC offset is not ``offset``."""
        low = start
        while low < end:
            high = min(low + _OFFSET_SCAN_STEP, end)
            if high.astimezone(self.zone).utcoffset() != offset:
                while high - low > _SECOND:  # invariant: low has `offset`, high does not
                    middle = low + (high - low) / 2
                    if middle.astimezone(self.zone).utcoffset() == offset:
                        low = middle
                    else:
                        high = middle
                return high
            low = high
        return None

    def _strictly_before(self, when: datetime) -> datetime | None:
        memo = self._rule.before
        found = memo.get(when, _MISS)
        if found is _MISS:
            found = self._before_uncached(when)
            _remember(memo, when, found)
        return found  # type: ignore[return-value]

    def _before_uncached(self, when: datetime) -> datetime | None:
        current = when.astimezone(self.zone)
        cron = self._rule.iterator()
        try:
            while True:
                local = cron.get_prev(datetime, start_time=current)
                if not self._is_repeat(local):
                    break
                current = local
        except CroniterBadDateError:
            return None
        found = local.astimezone(UTC)
        # Walk forward with get_next (the reference): get_prev must agree with it across DST.
        while (following := self._after(found)) is not None and following < when:
            found = following
        return found if found < when else None

    def _at_or_before(self, when: datetime) -> datetime | None:
        before = self._strictly_before(when)
        if before is None:
            return when if self._fires_at(when) else None
        following = self._after(before)
        return following if following is not None and following <= when else before

    def _fires_at(self, when: datetime) -> bool:
        return self._after(when - _SECOND) == when

    def _interval_start(self, logical_date: datetime) -> datetime:
        before = self._strictly_before(logical_date)
        return before if before is not None else logical_date


class _CronRule:
    """One (expression, zone), shared by every timetable that has it: croniter's expansion of
    the expression, and memos of the answers (see the module docstring)."""

    __slots__ = ("_proto", "after", "before", "every_hour")

    def __init__(self, expression: str, zone: tzinfo) -> None:
        self._proto = croniter(expression, datetime(2000, 1, 1, tzinfo=zone))
        hours = self._proto.expanded[1]
        self.every_hour = hours == ["*"] or len(hours) == 24
        self.after: dict[datetime, datetime | None] = {}
        self.before: dict[datetime, datetime | None] = {}

    def iterator(self) -> croniter:
        """A croniter of its own for one query (~1.5 us: no re-expansion)."""
        return copy.copy(self._proto)


@functools.lru_cache(maxsize=4096)
def _cron_rule(expression: str, zone: tzinfo) -> _CronRule:
    return _CronRule(expression, zone)


def _remember(memo: dict[datetime, datetime | None], when: datetime, found: Any) -> None:
    if len(memo) >= _MEMO_MAX:
        memo.clear()
    memo[when] = found
