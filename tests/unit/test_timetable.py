"""Schedule maths: presets, seconds cron, intervals, bounds, data intervals, DST, catch-up."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftsched.core.model import DagSpec, Schedule, ScheduleKind
from raftsched.core.timetable import (
    CronTimetable,
    IntervalTimetable,
    Slot,
    check_cron,
    due_slots,
    from_schedule,
    get_zone,
    timetable_for,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def local(text: str, zone: ZoneInfo, fold: int = 0) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zone, fold=fold).astimezone(UTC)


def cron(expr: str, tz: str = "UTC", start: datetime | None = None, end=None) -> CronTimetable:
    return CronTimetable(expr, ZoneInfo(tz), start, end)


def fires(table, after: datetime, until: datetime) -> list[datetime]:
    return [s.logical_date for s in table.slots_between(after, until, 1000)]


# -- presets and cron forms -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("@hourly", "2024-05-01 10:30", ["2024-05-01 11:00", "2024-05-01 12:00"]),
        ("@daily", "2024-05-01 10:30", ["2024-05-02 00:00", "2024-05-03 00:00"]),
        ("@midnight", "2024-05-01 10:30", ["2024-05-02 00:00", "2024-05-03 00:00"]),
        ("@weekly", "2024-05-01 10:30", ["2024-05-05 00:00", "2024-05-12 00:00"]),  # Sundays
        ("@monthly", "2024-05-01 10:30", ["2024-06-01 00:00", "2024-07-01 00:00"]),
        ("@yearly", "2024-05-01 10:30", ["2025-01-01 00:00", "2026-01-01 00:00"]),
        ("@annually", "2024-05-01 10:30", ["2025-01-01 00:00", "2026-01-01 00:00"]),
        ("*/15 * * * *", "2024-05-01 10:31", ["2024-05-01 10:45", "2024-05-01 11:00"]),
        ("0 9 * * 1-5", "2024-05-03 10:00", ["2024-05-06 09:00", "2024-05-07 09:00"]),
        # 6 fields: seconds are the LAST field (croniter's convention)
        ("* * * * * */20", "2024-05-01 10:00:05", ["2024-05-01 10:00:20", "2024-05-01 10:00:40"]),
        ("30 2 * * * 15", "2024-05-01 00:00", ["2024-05-01 02:30:15", "2024-05-02 02:30:15"]),
    ],
)
def test_cron_and_presets(expr: str, after: str, expected: list[str]) -> None:
    table = cron(expr)
    got, slot = [], table.next_slot(utc(after))
    while slot is not None and len(got) < len(expected):
        got.append(slot.logical_date)
        slot = table.next_slot(slot.logical_date)
    assert got == [utc(e) for e in expected]


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("61 * * * *", "out of range"),
        ("* * *", "expected 5 fields"),
        ("0 0 * * * * 2030", "expected 5 fields"),
        ("0 0 31 2 *", "never matches"),
        ("a b c d e", "is not acceptable"),
    ],
)
def test_invalid_cron_names_expression_and_reason(expr: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as info:
        check_cron(expr)
    assert repr(expr) in str(info.value)


def test_unknown_zone_suggests_a_close_name() -> None:
    with pytest.raises(ValueError, match="did you mean 'Europe/Berlin'"):
        get_zone("Europe/Berln")
    with pytest.raises(ValueError, match="such as 'Europe/Berlin'"):
        get_zone("Nowhere/Special")


# -- data intervals and bounds --------------------------------------------------------------


def test_first_cron_slot_interval_starts_at_previous_cron_time_before_start_date() -> None:
    table = cron("0 * * * *", start=utc("2024-05-01 10:30"))
    assert table.next_slot(None) == Slot(
        utc("2024-05-01 11:00"), utc("2024-05-01 10:00"), utc("2024-05-01 11:00")
    )


def test_start_date_on_a_cron_time_is_the_first_slot() -> None:
    table = cron("0 * * * *", start=utc("2024-05-01 10:00"))
    assert table.next_slot(None).logical_date == utc("2024-05-01 10:00")
    assert table.next_slot(utc("2000-01-01 00:00")).logical_date == utc("2024-05-01 10:00")


def test_end_date_is_inclusive_and_bounds_slots() -> None:
    table = cron("0 * * * *", start=utc("2024-05-01 10:00"), end=utc("2024-05-01 12:00"))
    assert fires(table, None, utc("2030-01-01 00:00")) == [
        utc("2024-05-01 10:00"),
        utc("2024-05-01 11:00"),
        utc("2024-05-01 12:00"),
    ]
    assert table.next_slot(utc("2024-05-01 12:00")) is None
    assert table.latest_slot(utc("2030-01-01 00:00")).logical_date == utc("2024-05-01 12:00")
    assert table.latest_slot(utc("2024-05-01 09:59")) is None


def test_interval_slots_are_fixed_utc_durations_from_start() -> None:
    start = local("2024-03-30 12:00", BERLIN)  # crosses Berlin's spring-forward: no effect
    table = IntervalTimetable(timedelta(hours=12), start)
    assert table.next_slot(None) == Slot(start, start - timedelta(hours=12), start)
    got = fires(table, None, start + timedelta(days=2))
    assert got == [start + timedelta(hours=12 * k) for k in range(5)]
    assert table.next_slot(start + timedelta(hours=5)).logical_date == start + timedelta(hours=12)
    assert table.latest_slot(start + timedelta(hours=30)).logical_date == start + timedelta(
        hours=24
    )
    assert table.latest_slot(start - timedelta(seconds=1)) is None


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (Schedule(ScheduleKind.ONCE, display="@once"), [utc("2024-05-01 10:00")]),
        (Schedule(ScheduleKind.NONE), []),
    ],
)
def test_once_and_none(schedule: Schedule, expected: list[datetime]) -> None:
    table = from_schedule(schedule, "UTC", utc("2024-05-01 10:00"))
    assert fires(table, None, utc("2030-01-01 00:00")) == expected
    assert table.next_slot(utc("2024-05-01 10:00")) is None
    if expected:
        slot = table.next_slot(None)
        assert slot.data_interval_start == slot.data_interval_end == slot.logical_date


# -- daylight-saving time -------------------------------------------------------------------
# Berlin: 2024-03-31 02:00 -> 03:00 (spring forward); 2024-10-27 03:00 -> 02:00 (fall back).
# New York: 2024-03-10 02:00 -> 03:00; 2024-11-03 02:00 -> 01:00.


@pytest.mark.parametrize(
    ("expr", "zone", "after", "until", "expected"),
    [
        pytest.param(
            "0 2 * * *", BERLIN, "2024-10-26 00:00", "2024-10-28 12:00",
            [("2024-10-26 02:00", 0), ("2024-10-27 02:00", 0), ("2024-10-28 02:00", 0)],
            id="berlin-fall-back-daily-runs-once-at-first-occurrence",
        ),
        pytest.param(
            "30 2 * * *", BERLIN, "2024-03-30 00:00", "2024-04-01 12:00",
            [("2024-03-30 02:30", 0), ("2024-03-31 03:00", 0), ("2024-04-01 02:30", 0)],
            id="berlin-spring-forward-daily-in-gap-fires-after-gap",
        ),
        pytest.param(
            "0 * * * *", BERLIN, "2024-03-31 00:30", "2024-03-31 04:30",
            [("2024-03-31 01:00", 0), ("2024-03-31 03:00", 0), ("2024-03-31 04:00", 0)],
            id="berlin-spring-forward-hourly-skips-missing-hour",
        ),
        pytest.param(
            "0 * * * *", BERLIN, "2024-10-27 00:30", "2024-10-27 03:30",
            [("2024-10-27 01:00", 0), ("2024-10-27 02:00", 0), ("2024-10-27 02:00", 1),
             ("2024-10-27 03:00", 0)],
            id="berlin-fall-back-hourly-runs-every-real-hour",
        ),
        pytest.param(
            "*/20 2 * * *", BERLIN, "2024-10-27 01:30", "2024-10-27 04:00",
            [("2024-10-27 02:00", 0), ("2024-10-27 02:20", 0), ("2024-10-27 02:40", 0)],
            id="berlin-fall-back-fixed-hour-minutes-once",
        ),
        pytest.param(
            "*/20 2 * * *", BERLIN, "2024-03-31 01:30", "2024-03-31 04:00",
            [("2024-03-31 03:00", 0)],
            id="berlin-spring-forward-gap-times-collapse-to-one",
        ),
        pytest.param(
            "0 2,3 * * *", BERLIN, "2024-03-31 00:00", "2024-03-31 12:00",
            [("2024-03-31 03:00", 0)],
            id="berlin-spring-forward-no-duplicate-with-next-hour",
        ),
        pytest.param(
            "0 2 * * *", NEW_YORK, "2024-03-09 00:00", "2024-03-11 12:00",
            [("2024-03-09 02:00", 0), ("2024-03-10 03:00", 0), ("2024-03-11 02:00", 0)],
            id="new-york-spring-forward-daily",
        ),
        pytest.param(
            "30 1 * * *", NEW_YORK, "2024-11-02 00:00", "2024-11-04 12:00",
            [("2024-11-02 01:30", 0), ("2024-11-03 01:30", 0), ("2024-11-04 01:30", 0)],
            id="new-york-fall-back-daily-runs-once",
        ),
        pytest.param(
            "0 * * * *", NEW_YORK, "2024-11-03 00:30", "2024-11-03 02:30",
            [("2024-11-03 01:00", 0), ("2024-11-03 01:00", 1), ("2024-11-03 02:00", 0)],
            id="new-york-fall-back-hourly-runs-every-real-hour",
        ),
        pytest.param(
            "0 * * * *", NEW_YORK, "2024-03-10 00:30", "2024-03-10 04:30",
            [("2024-03-10 01:00", 0), ("2024-03-10 03:00", 0), ("2024-03-10 04:00", 0)],
            id="new-york-spring-forward-hourly",
        ),
        pytest.param(
            "0 0 * * *", BERLIN, "2024-03-30 12:00", "2024-04-01 12:00",
            [("2024-03-31 00:00", 0), ("2024-04-01 00:00", 0)],
            id="berlin-midnight-keeps-wall-clock-across-change",
        ),
    ],
)  # fmt: skip
def test_dst(expr, zone, after, until, expected) -> None:
    table = CronTimetable(expr, zone)
    got = fires(table, local(after, zone), local(until, zone))
    assert got == [local(text, zone, fold) for text, fold in expected]
    # latest_slot (used by catchup=False) agrees with next_slot at and just after each slot.
    for when in got:
        assert table.latest_slot(when).logical_date == when
        assert table.latest_slot(when + timedelta(seconds=59)).logical_date == when
    # Each data interval starts where the previous slot was.
    for previous, current in itertools.pairwise(got):
        assert table.slot_at(current).data_interval_start == previous


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK])
@pytest.mark.parametrize("expr", ["0 2 * * *", "30 2 * * *", "0 * * * *", "*/30 1-3 * * *"])
def test_slots_strictly_increase_and_count_per_day_around_dst(expr, zone) -> None:
    table = CronTimetable(expr, zone)
    # Whole local days from 2024-03-01 to 2024-11-30: both changes of both zones.
    got = table.slots_between(
        local("2024-03-01 00:00", zone) - timedelta(seconds=1),
        local("2024-11-30 23:59:59", zone),
        10_000,
    )
    got = [s.logical_date for s in got]
    assert all(a < b for a, b in itertools.pairwise(got))
    per_day: dict[object, int] = {}
    for when in got:
        day = when.astimezone(zone).date()
        per_day[day] = per_day.get(day, 0) + 1
    counts = set(per_day.values())
    if expr == "0 * * * *":
        assert counts == {23, 24, 25}  # real hours on spring-forward / normal / fall-back days
    elif expr == "*/30 1-3 * * *":
        assert max(counts) == 6  # never more than the wall-clock times of one day
    else:
        assert counts == {1}


# -- due slots and catch-up -----------------------------------------------------------------


def spec(schedule: Schedule, *, catchup: bool, start: datetime | None, **kw) -> DagSpec:
    return DagSpec(
        dag_id="d", fileloc="f.py", schedule=schedule, catchup=catchup, start_date=start, **kw
    )


HOURLY = Schedule(ScheduleKind.CRON, cron="0 * * * *", display="@hourly")
START = utc("2024-05-01 00:00")


@pytest.mark.parametrize(
    ("catchup", "last", "now", "limit", "expected"),
    [
        (True, None, "2024-05-01 03:30", 10, ["00:00", "01:00", "02:00", "03:00"]),
        (True, None, "2024-05-01 03:30", 2, ["00:00", "01:00"]),
        (True, "2024-05-01 01:00", "2024-05-01 03:30", 10, ["02:00", "03:00"]),
        (True, "2024-05-01 03:00", "2024-05-01 03:30", 10, []),
        (True, None, "2024-04-30 23:59", 10, []),
        (True, None, "2024-05-01 03:30", 0, []),
        (False, None, "2024-05-01 03:30", 10, ["03:00"]),
        (False, "2024-05-01 01:00", "2024-05-01 03:30", 10, ["03:00"]),
        (False, "2024-05-01 03:00", "2024-05-01 03:59", 10, []),
        (False, "2024-05-01 03:00", "2024-05-01 04:00", 10, ["04:00"]),
    ],
)
def test_due_slots_catchup(catchup, last, now, limit, expected) -> None:
    the_spec = spec(HOURLY, catchup=catchup, start=START)
    got = due_slots(
        the_spec,
        last_logical_date=utc(last) if last else None,
        now=utc(now),
        limit=limit,
    )
    assert [s.logical_date for s in got] == [utc(f"2024-05-01 {t}") for t in expected]


def test_due_without_start_date_yields_only_the_latest_slot_even_with_catchup() -> None:
    got = due_slots(
        spec(HOURLY, catchup=True, start=None),
        last_logical_date=None,
        now=utc("2024-05-01 03:30"),
        limit=10,
    )
    assert [s.logical_date for s in got] == [utc("2024-05-01 03:00")]


def test_due_respects_end_date_and_once_and_none() -> None:
    bounded = spec(HOURLY, catchup=False, start=START, end_date=utc("2024-05-01 02:00"))
    got = due_slots(bounded, last_logical_date=None, now=utc("2024-06-01 00:00"), limit=5)
    assert [s.logical_date for s in got] == [utc("2024-05-01 02:00")]
    once = spec(Schedule(ScheduleKind.ONCE), catchup=False, start=START)
    assert len(due_slots(once, last_logical_date=None, now=utc("2024-06-01 00:00"), limit=5)) == 1
    assert due_slots(once, last_logical_date=START, now=utc("2024-06-01 00:00"), limit=5) == []
    never = spec(Schedule(ScheduleKind.NONE), catchup=True, start=START)
    assert due_slots(never, last_logical_date=None, now=utc("2030-01-01 00:00"), limit=5) == []


def test_due_interval_and_zone_from_spec() -> None:
    every_6h = spec(
        Schedule(ScheduleKind.INTERVAL, interval_seconds=6 * 3600),
        catchup=True,
        start=START,
    )
    got = due_slots(every_6h, last_logical_date=None, now=utc("2024-05-01 13:00"), limit=10)
    assert [(s.data_interval_start, s.logical_date) for s in got] == [
        (START - timedelta(hours=6), START),
        (START, START + timedelta(hours=6)),
        (START + timedelta(hours=6), START + timedelta(hours=12)),
    ]
    berlin = DagSpec(
        dag_id="b",
        fileloc="f.py",
        schedule=Schedule(ScheduleKind.CRON, cron="0 2 * * *"),
        timezone="Europe/Berlin",
    )
    assert timetable_for(berlin).next_slot(utc("2024-07-01 00:00")).logical_date == utc(
        "2024-07-02 00:00"
    )


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        cron("0 * * * *").next_slot(datetime(2024, 1, 1))


# -- properties -----------------------------------------------------------------------------

DST_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe"]


@st.composite
def cron_expressions(draw: st.DrawFn) -> str:
    minutes = draw(st.sets(st.integers(0, 59), min_size=1, max_size=3))
    hours = draw(st.one_of(st.just("*"), st.sets(st.integers(0, 23), min_size=1, max_size=4)))
    hour_field = hours if hours == "*" else ",".join(map(str, sorted(hours)))
    return f"{','.join(map(str, sorted(minutes)))} {hour_field} * * *"


@settings(max_examples=30, deadline=None)
@given(
    expr=cron_expressions(),
    zone=st.sampled_from(DST_ZONES),
    # Start near a DST change of the northern or southern zones.
    start=st.sampled_from(
        ["2024-03-09", "2024-03-30", "2024-04-06", "2024-10-05", "2024-10-26", "2024-11-02"]
    ),
)
def test_cron_slots_are_consistent_across_dst(expr: str, zone: str, start: str) -> None:
    table = CronTimetable(expr, ZoneInfo(zone))
    got = fires(table, utc(f"{start} 00:00"), utc(f"{start} 00:00") + timedelta(days=2))
    assert all(a < b for a, b in itertools.pairwise(got))
    for previous, current in itertools.pairwise(got):
        assert table.latest_slot(current - timedelta(seconds=1)).logical_date == previous
        assert table.latest_slot(current).logical_date == current
        assert table.slot_at(current).data_interval_start == previous
        assert table.next_slot(previous + timedelta(seconds=1)).logical_date == current
    if not table.every_hour:  # fixed hours: each wall-clock time fires at most once
        walls = [when.astimezone(ZoneInfo(zone)).replace(tzinfo=None) for when in got]
        assert len(walls) == len(set(walls))


def test_every_hour_cron_fires_both_passes_of_a_repeated_half_hour() -> None:
    # Lord Howe Island falls back 30 minutes (02:00 +11:00 -> 01:30 +10:30): 01:30 happens
    # twice, and an every-hour cron follows real elapsed time, so it fires at both instants.
    table = CronTimetable("1,30 * * * *", ZoneInfo("Australia/Lord_Howe"))
    got = fires(table, utc("2024-04-06 14:00"), utc("2024-04-06 15:59"))
    assert got == [
        utc("2024-04-06 14:01"),
        utc("2024-04-06 14:30"),  # 01:30 +11:00
        utc("2024-04-06 15:00"),  # 01:30 +10:30, the second pass
        utc("2024-04-06 15:31"),  # 02:01 +10:30
    ]
    assert table.latest_slot(utc("2024-04-06 15:30")).logical_date == utc("2024-04-06 15:00")


@pytest.mark.parametrize(
    ("expr", "zone"),
    [
        ("*/5 * * * *", "UTC"),
        ("30 2 * * *", "Europe/Berlin"),  # a gap and a repeat each year
        ("0 * * * *", "Australia/Lord_Howe"),  # every hour, a 30-minute fall-back
        ("* * * * * */20", "America/New_York"),  # seconds
    ],
)
def test_shared_rule_memo_answers_as_a_fresh_timetable_does(expr: str, zone: str) -> None:
    """Timetables with one (expression, zone) share croniter's expansion and memoized
    answers (the cost of 100,000 DAGs): every answer equals a fresh computation's."""
    from raftsched.core import timetable as tt

    shared = tt.from_schedule(Schedule(ScheduleKind.CRON, cron=expr), zone)
    again = tt.from_schedule(Schedule(ScheduleKind.CRON, cron=expr), zone)
    assert isinstance(shared, tt.CronTimetable) and isinstance(again, tt.CronTimetable)
    assert shared._rule is again._rule
    fresh = tt.CronTimetable(expr, tt.get_zone(zone))
    fresh._rule = tt._CronRule(fresh.expression, fresh.zone)  # a memo of its own, empty
    instants = [
        datetime(2024, 3, 30, 22, tzinfo=UTC) + timedelta(minutes=7 * k, seconds=k % 3)
        for k in range(120)
    ] + [datetime(2024, 10, 26, 22, tzinfo=UTC) + timedelta(minutes=11 * k) for k in range(120)]
    for when in instants:
        expected_after, expected_before = fresh._after(when), fresh._strictly_before(when)
        for timetable in (shared, again, shared):  # a miss, then hits
            assert timetable._after(when) == expected_after
            assert timetable._strictly_before(when) == expected_before
