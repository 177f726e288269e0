"""A DAG's daylight-saving policy for cron schedules with fixed hours (``timetable_cron``
documents the default: a repeated wall-clock time fires once, its first occurrence; a time
inside the spring-forward gap fires once, at the first instant after the gap).

- ``dst_repeated="twice"``: a wall-clock time repeated on the fall-back day fires at both
  occurrences (``"30 2 * * *"`` in Europe/Berlin on 2024-10-27: 00:30 and 01:30 UTC).
- ``dst_skipped="skip"``: a time inside the spring-forward gap does not fire that day.

Crons whose hour field is ``*`` follow real elapsed time already (both occurrences, no gap
slot): the policies change nothing for them. Pure, like every timetable; the answers are not
put in the shared per-rule memos (other DAGs with the same cron may have other policies).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from croniter import croniter

from raftsched.core.timetable_cron import CronTimetable

DST_REPEATED = ("", "once", "twice")  # "": the default, once
DST_SKIPPED = ("", "shift", "skip")  # "": the default, shift
_TWIN_WINDOW = timedelta(hours=3)  # a repeated time's second occurrence comes within this


class DstCronTimetable(CronTimetable):
    def __init__(self, *args: object, repeated: str, skipped: str, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.twice = repeated == "twice" and not self.every_hour
        self.skip_gap = skipped == "skip" and not self.every_hour

    def _after(self, when: datetime) -> datetime | None:
        found = super()._after(when)
        if self.twice:
            found = _earliest(found, self._twin_after(when))
        while found is not None and self.skip_gap and self._in_gap(found):
            found = self._after(found)
        return found

    def _strictly_before(self, when: datetime) -> datetime | None:
        found = self._before_uncached(when)  # walks forward with this class's _after
        while found is not None and self.skip_gap and self._in_gap(found):
            found = self._strictly_before(found)
        return found

    def _twin_after(self, when: datetime) -> datetime | None:
        """The second occurrence, after ``when``, of a first occurrence at or before it."""
        fire = super()._after(when - _TWIN_WINDOW)
        best = None
        while fire is not None and fire <= when:
            twin = self.twin(fire)
            if twin is not None and twin > when:
                best = _earliest(best, twin)
            fire = super()._after(fire)
        return best

    def twin(self, fire: datetime) -> datetime | None:
        """The second occurrence of ``fire``'s wall-clock time, if it is repeated."""
        local = fire.astimezone(self.zone)
        second = local.replace(fold=1)
        if local.fold or second.utcoffset() == local.utcoffset():
            return None
        return second.astimezone(UTC)

    def _in_gap(self, fire: datetime) -> bool:
        """A fire time moved to the end of a spring-forward gap (its wall time is not one the
        cron names)."""
        local = fire.astimezone(self.zone).replace(tzinfo=None)
        return not croniter.match(self.expression, local)


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
