"""DueIndex: the heap of next fire times the leader reads every tick."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from raftsched.core.due import DueIndex
from raftsched.core.model import DagSpec, RunType, Schedule, ScheduleKind

START = datetime(2024, 5, 1, tzinfo=UTC)


def hourly(dag_id: str, *, catchup: bool = True, minute: int = 0, **kw) -> DagSpec:
    spec = DagSpec(
        dag_id=dag_id,
        fileloc=f"{dag_id}.py",
        schedule=Schedule(ScheduleKind.CRON, cron=f"{minute} * * * *"),
        start_date=START,
        catchup=catchup,
        **kw,
    )
    return replace(spec, spec_hash=spec.compute_hash())


def at(hours: float) -> datetime:
    return START + timedelta(hours=hours)


def unlimited(dag_id: str) -> int:
    return 100


def test_catchup_yields_every_missed_slot_in_order_with_data_intervals() -> None:
    index = DueIndex()
    index.upsert(hourly("a"), last_logical_date=None, paused=False)
    got = index.collect(at(2.5), capacity=unlimited, limit=100)
    assert [d.logical_date for d in got] == [at(0), at(1), at(2)]
    assert got[1].data_interval_start == at(0) and got[1].data_interval_end == at(1)
    assert {d.run_type for d in got} == {RunType.SCHEDULED}


def test_no_catchup_yields_only_the_latest_missed_slot() -> None:
    index = DueIndex()
    index.upsert(hourly("a", catchup=False), last_logical_date=None, paused=False)
    assert [d.logical_date for d in index.collect(at(5.5), capacity=unlimited, limit=9)] == [at(5)]


def test_collect_repeats_until_mark_created_then_advances() -> None:
    index = DueIndex()
    index.upsert(hourly("a"), last_logical_date=None, paused=False)
    first = index.collect(at(1.5), capacity=unlimited, limit=100)
    assert index.collect(at(1.5), capacity=unlimited, limit=100) == first  # not yet committed
    index.mark_created("a", at(0))
    assert [d.logical_date for d in index.collect(at(1.5), capacity=unlimited, limit=100)] == [
        at(1)
    ]
    index.mark_created("a", at(1))
    assert index.collect(at(1.5), capacity=unlimited, limit=100) == []
    assert index.next_wakeup() == at(2)
    index.mark_created("a", at(0))  # an older date never moves a DAG back
    assert index.next_wakeup() == at(2)


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        ({"a": 2, "b": 0, "c": 5}, {"a": 2, "b": 0, "c": 3}),
        ({"a": 0, "b": 0, "c": 0}, {"a": 0, "b": 0, "c": 0}),
        ({"a": 1, "b": 1, "c": 1}, {"a": 1, "b": 1, "c": 1}),
    ],
)
def test_capacity_limits_runs_per_dag(caps: dict[str, int], expected: dict[str, int]) -> None:
    index = DueIndex()
    for dag_id in "abc":
        index.upsert(hourly(dag_id), last_logical_date=None, paused=False)
    got = index.collect(at(2.5), capacity=caps.__getitem__, limit=100)
    counts = {dag_id: sum(d.dag_id == dag_id for d in got) for dag_id in "abc"}
    assert counts == expected
    a_dates = [d.logical_date for d in got if d.dag_id == "a"]
    assert a_dates == sorted(a_dates)


def test_limit_bounds_a_tick_and_the_rest_stays_due() -> None:
    index = DueIndex()
    for dag_id in ("a", "b", "c"):
        index.upsert(hourly(dag_id), last_logical_date=None, paused=False)
    got = index.collect(at(1.5), capacity=unlimited, limit=4)
    assert len(got) == 4
    assert index.next_wakeup() <= at(1.5)  # more work is due right away
    for decision in got:
        index.mark_created(decision.dag_id, decision.logical_date)
    rest = index.collect(at(1.5), capacity=unlimited, limit=100)
    assert len(rest) == 2  # 3 DAGs x 2 slots, 4 already created


def test_dag_at_capacity_is_parked_out_of_next_wakeup_and_rechecked_next_tick() -> None:
    index = DueIndex()
    index.upsert(hourly("busy"), last_logical_date=None, paused=False)
    index.upsert(hourly("later", minute=30), last_logical_date=at(0.5), paused=False)
    assert index.collect(at(0.2), capacity=lambda d: 0, limit=100) == []
    assert index.next_wakeup() == at(1.5)  # "busy" is parked; the leader need not spin
    got = index.collect(at(0.2), capacity=unlimited, limit=100)
    assert [(d.dag_id, d.logical_date) for d in got] == [("busy", at(0))]


def test_paused_and_removed_dags_are_never_due() -> None:
    index = DueIndex()
    index.upsert(hourly("p"), last_logical_date=None, paused=True)
    index.upsert(hourly("r"), last_logical_date=None, paused=False)
    index.remove("r")
    index.remove("unknown")  # no-op
    assert index.collect(at(3), capacity=unlimited, limit=100) == []
    assert index.next_wakeup() is None
    index.upsert(hourly("p", catchup=False), last_logical_date=None, paused=False)  # unpause
    assert [d.logical_date for d in index.collect(at(3), capacity=unlimited, limit=9)] == [at(3)]


def test_readding_a_removed_dag_does_not_revive_its_stale_entry() -> None:
    index = DueIndex()
    index.upsert(hourly("a"), last_logical_date=None, paused=False)
    index.remove("a")
    index.upsert(hourly("a"), last_logical_date=at(1), paused=False)
    assert [d.logical_date for d in index.collect(at(2.5), capacity=unlimited, limit=9)] == [at(2)]


def test_upsert_with_a_changed_schedule_reschedules() -> None:
    index = DueIndex()
    index.upsert(hourly("a"), last_logical_date=at(0), paused=False)
    assert index.next_wakeup() == at(1)
    index.upsert(hourly("a", minute=15), last_logical_date=at(0), paused=False)
    assert index.next_wakeup() == at(0.25)


def test_manual_and_finished_dags_have_no_wakeup() -> None:
    index = DueIndex()
    manual = DagSpec(dag_id="m", fileloc="m.py", schedule=Schedule(ScheduleKind.NONE))
    once = DagSpec(
        dag_id="o", fileloc="o.py", schedule=Schedule(ScheduleKind.ONCE), start_date=START
    )
    index.upsert(manual, last_logical_date=None, paused=False)
    index.upsert(once, last_logical_date=START, paused=False)
    assert index.next_wakeup() is None
    assert index.collect(at(100), capacity=unlimited, limit=9) == []


def test_a_tick_costs_log_n_heap_work_not_all_dags() -> None:
    """2 000 DAGs, 3 due: a tick pops a handful of entries, not thousands."""
    index = DueIndex()
    for i in range(2_000):
        index.upsert(hourly(f"d{i}", minute=30), last_logical_date=at(0.5), paused=False)
    for i in range(3):
        index.upsert(hourly(f"due{i}"), last_logical_date=at(0), paused=False)
    before = index.pops
    got = index.collect(at(1.1), capacity=unlimited, limit=100)
    assert sorted(d.dag_id for d in got) == ["due0", "due1", "due2"]
    assert index.pops - before == 3
    # A DAG parked at capacity costs one pop per tick, whatever the number of DAGs.
    index.mark_created("due0", at(1))
    index.mark_created("due1", at(1))
    before = index.pops
    for _ in range(5):
        index.collect(at(1.1), capacity=lambda d: 0, limit=100)
    assert index.pops - before <= 5 + 2  # + the 2 stale entries left by mark_created
    assert index.next_wakeup() == at(1.5)


def test_stale_entries_are_compacted() -> None:
    index = DueIndex()
    index.upsert(hourly("a"), last_logical_date=at(0), paused=False)
    for hour in range(1, 500):
        index.mark_created("a", at(hour))
    index.collect(at(0), capacity=unlimited, limit=1)
    assert len(index._heap) < 100
    assert index.next_wakeup() == at(500)
