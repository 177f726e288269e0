"""Which slots a backfill fills: the DAG's own slots in the range, both ends included, minus
the taken ones; a DAG without a schedule and a range too long are refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest

from raftsched.api.servicers.backfill import backfill_run_id, plan
from raftsched.core.model import DagSpec, Schedule, ScheduleKind, TaskSpec
from raftsched.errors import StatusError

START = datetime(2024, 3, 30, tzinfo=UTC)


def spec(schedule: Schedule, timezone: str = "UTC", start: datetime | None = START) -> DagSpec:
    task = TaskSpec(task_id="a", kind="bash", command="true")
    return DagSpec(
        dag_id="d", fileloc="/d.py", schedule=schedule, tasks=(task,), timezone=timezone,
        start_date=start,
    )  # fmt: skip


DAILY_2AM = Schedule(ScheduleKind.CRON, cron="0 2 * * *", display="0 2 * * *")


def test_slots_in_the_range_both_ends_included_minus_taken() -> None:
    day = timedelta(days=1)
    first = START + timedelta(hours=2)
    taken = {first + day}
    todo = plan(spec(DAILY_2AM), first, first + 3 * day, taken)
    assert [s.logical_date for s in todo.create] == [first, first + 2 * day, first + 3 * day]
    assert todo.skipped == [first + day]
    assert todo.create[0].data_interval_start == first - day  # as the scheduler makes them


def test_slots_follow_the_dags_time_zone_across_daylight_saving() -> None:
    """02:00 in Berlin: 01:00 UTC in winter, 00:00 UTC in summer; 2024-03-31 02:00 does not
    exist there and fires once at 03:00 CEST (01:00 UTC)."""
    todo = plan(
        spec(DAILY_2AM, "Europe/Berlin"),
        datetime(2024, 3, 30, tzinfo=UTC),
        datetime(2024, 4, 1, 23, tzinfo=UTC),
        set(),
    )
    assert [s.logical_date for s in todo.create] == [
        datetime(2024, 3, 30, 1, tzinfo=UTC),
        datetime(2024, 3, 31, 1, tzinfo=UTC),
        datetime(2024, 4, 1, 0, tzinfo=UTC),
    ]


def test_the_dags_start_date_bounds_the_range() -> None:
    hourly = Schedule(ScheduleKind.CRON, cron="0 * * * *", display="@hourly")
    todo = plan(spec(hourly), START - timedelta(days=5), START + timedelta(hours=1), set())
    assert [s.logical_date for s in todo.create] == [START, START + timedelta(hours=1)]


def test_no_schedule_is_failed_precondition() -> None:
    with pytest.raises(StatusError) as raised:
        plan(spec(Schedule(ScheduleKind.NONE)), START, START, set())
    assert raised.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert "dags trigger" in raised.value.message


def test_too_many_slots_is_invalid_argument() -> None:
    minutely = Schedule(ScheduleKind.CRON, cron="* * * * *", display="* * * * *")
    with pytest.raises(StatusError) as raised:
        plan(spec(minutely), START, START + timedelta(minutes=10), set(), limit=5)
    assert raised.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "end_date" in raised.value.message and "in parts" in raised.value.message
    assert (
        len(plan(spec(minutely), START, START + timedelta(minutes=4), set(), limit=5).create) == 5
    )


def test_run_ids_name_the_logical_date_in_utc() -> None:
    assert backfill_run_id(START) == "backfill__2024-03-30T00:00:00+00:00"
