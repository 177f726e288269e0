"""DST policies for cron schedules (core/timetable_dst.py): a table of zones and crons across
both changes, and properties (slots strictly increasing; latest_slot agrees with next_slot)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftsched.core.model import DagSpec, Schedule, ScheduleKind
from raftsched.core.timetable import timetable_for

START = datetime(2024, 1, 1, tzinfo=UTC)


def spec(cron: str, zone: str = "Europe/Berlin", **kw: str) -> DagSpec:
    return DagSpec(
        dag_id="d",
        fileloc="d.py",
        schedule=Schedule(ScheduleKind.CRON, cron=cron),
        timezone=zone,
        start_date=START,
        **kw,
    )


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


FALL = (utc("2024-10-26T12:00"), utc("2024-10-28T12:00"))  # Europe/Berlin falls back 27th
SPRING = (utc("2024-03-30T12:00"), utc("2024-04-01T12:00"))  # springs forward 31st

CASES = [
    ("default: a repeated time once", "30 2 * * *", {}, FALL, ["2024-10-27T00:30"]),
    (
        "twice: both occurrences",
        "30 2 * * *",
        {"dst_repeated": "twice"},
        FALL,
        ["2024-10-27T00:30", "2024-10-27T01:30"],
    ),
    ("default: a gap time shifts to the gap's end", "30 2 * * *", {}, SPRING, ["2024-03-31T01:00"]),
    ("skip: a gap time does not run that day", "30 2 * * *", {"dst_skipped": "skip"}, SPRING, []),
    (
        "skip leaves times outside the gap alone",
        "30 3 * * *",
        {"dst_skipped": "skip"},
        SPRING,
        ["2024-03-31T01:30"],
    ),
    (
        "twice on a time that is not repeated: once",
        "30 4 * * *",
        {"dst_repeated": "twice"},
        FALL,
        ["2024-10-27T03:30"],
    ),
    (
        "hourly crons follow elapsed time whatever the policy",
        "0 * * * *",
        {"dst_repeated": "twice", "dst_skipped": "skip"},
        (utc("2024-10-26T23:59"), utc("2024-10-27T01:59")),
        ["2024-10-27T00:00", "2024-10-27T01:00"],
    ),
    (
        "a zone without DST: nothing changes",
        "30 2 * * *",
        {"dst_repeated": "twice", "dst_skipped": "skip"},
        FALL,
        ["2024-10-27T02:30"],
    ),
]


@pytest.mark.parametrize(
    ("cron", "policy", "window", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_dst_policies(
    cron: str, policy: dict[str, str], window: tuple[datetime, datetime], expected: list[str]
) -> None:
    zone = "UTC" if expected == ["2024-10-27T02:30"] else "Europe/Berlin"  # the no-DST case
    table = timetable_for(spec(cron, zone, **policy))
    slots = table.slots_between(window[0], window[1], 10)
    day = [
        s.logical_date
        for s in slots
        if s.logical_date.date().isoformat() in {"2024-10-27", "2024-03-31"}
    ]
    assert day == [utc(x) for x in expected]


def test_the_second_occurrence_has_the_first_as_its_interval_start() -> None:
    table = timetable_for(spec("30 2 * * *", dst_repeated="twice"))
    slot = table.next_slot(utc("2024-10-27T01:00"))
    assert slot is not None and slot.logical_date == utc("2024-10-27T01:30")
    assert slot.data_interval_start == utc("2024-10-27T00:30")


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(["30 2 * * *", "*/20 2 * * *", "0 1-3 * * *", "15 3 * * 0"]),
    st.sampled_from(["", "twice"]),
    st.sampled_from(["", "skip"]),
    st.datetimes(min_value=datetime(2024, 3, 25), max_value=datetime(2024, 11, 2)),
)
def test_slots_strictly_increase_and_latest_agrees_with_next(
    cron: str, repeated: str, skipped: str, when: datetime
) -> None:
    table = timetable_for(spec(cron, dst_repeated=repeated, dst_skipped=skipped))
    at = when.replace(tzinfo=UTC)
    slots = table.slots_between(at, at + timedelta(days=3), 50)
    times = [s.logical_date for s in slots]
    assert times == sorted(set(times))
    for slot in slots:
        latest = table.latest_slot(slot.logical_date)
        assert latest is not None and latest.logical_date == slot.logical_date
        just_before = table.latest_slot(slot.logical_date - timedelta(seconds=1))
        assert just_before is None or just_before.logical_date < slot.logical_date


def test_the_defaults_leave_the_spec_as_before() -> None:
    plain = spec("30 2 * * *")
    assert replace(plain, dst_repeated="", dst_skipped="").to_dict() == plain.to_dict()
    assert "dst_repeated" not in plain.to_dict()
