"""Schedule policies in the pure core (core/slot_policy.py): given ticks of a leader over one
SchedulerState, expect runs and skipped ranges; apply's compare-and-set of each decision; and
the properties "buffer_all never loses a slot", "skip never overlaps"."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_state_harness import T0, Sim, dag, task

from raftsched.core import commands as c
from raftsched.core import limits as lim
from raftsched.core import results as r
from raftsched.core.due import DueIndex
from raftsched.core.model import RunType, Schedule, ScheduleKind
from raftsched.core.slot_policy import max_active, planned_start
from raftsched.core.state import SchedulerState

HOUR = timedelta(hours=1)


def h(hours: float) -> datetime:
    return T0 + hours * HOUR


def hourly(**kw: Any) -> Any:
    kw.setdefault("catchup", True)
    spec = dag("d", task("a"), start_date=T0, **kw)
    return replace(spec, schedule=Schedule(ScheduleKind.CRON, cron="0 * * * *", display="hourly"))


def tick(sim: Sim, now: datetime, *, record_skips: bool = True) -> list[c.RunDecision]:
    """One leader tick from the committed state (a fresh DueIndex, as after an election)."""
    due = DueIndex()
    for rec in sim.state.dags.values():
        due.upsert(
            rec.spec,
            last_logical_date=rec.last_logical_date,
            paused=rec.paused,
            scheduled_runs=rec.scheduled_runs,
        )

    def capacity(dag_id: str) -> int:
        spec = sim.state.dags[dag_id].spec
        return max_active(spec) - sim.state.active_run_count(dag_id)

    decisions = due.collect(now, capacity=capacity, limit=100, record_skips=record_skips)
    if decisions:
        result = sim.apply(c.CreateRuns(request_id=sim.rid(), now=now, runs=tuple(decisions)))
        assert all(item.ok for item in result.value), result
    return decisions


def finish_all(sim: Sim, now: datetime) -> None:
    for grant in sim.lease(n=100, now=now):
        assert sim.complete(grant, now=now).ok


def runs(sim: Sim) -> list[float]:
    return sorted((run.logical_date - T0) / HOUR for run in sim.state.runs("d"))


def skipped(sim: Sim) -> list[tuple[float, float, str]]:
    return [
        ((s.first - T0) / HOUR, (s.last - T0) / HOUR, s.reason) for s in sim.state.dags["d"].skipped
    ]


# Each case: the DAG's policy fields; then steps ("tick", hour) or ("finish", hour); expect the
# scheduled runs' hours and the skipped ranges (first hour, last hour, reason).
CASES: list[tuple[str, dict[str, Any], list[tuple[str, float]], list[float], list[Any]]] = [
    (
        "allow_all with max_active_runs=1 waits, then catches up in order",
        {"max_active_runs": 1},
        [("tick", 0), ("tick", 3), ("finish", 3), ("tick", 3), ("finish", 3), ("tick", 3)],
        [0, 1, 2],
        [],
    ),
    (
        "skip: slots due while a run is active are skipped",
        {"overlap": "skip"},
        [("tick", 0), ("tick", 3), ("finish", 3.5), ("tick", 4)],
        [0, 4],
        [(1, 3, "overlap")],
    ),
    (
        "buffer_one: the newest due slot waits, older ones are skipped",
        {"overlap": "buffer_one"},
        [("tick", 0), ("tick", 3), ("finish", 3.5), ("tick", 3.5)],
        [0, 3],
        [(1, 2, "overlap")],
    ),
    (
        "buffer_all: every due slot waits and runs one at a time",
        {"overlap": "buffer_all"},
        [("tick", 0), ("tick", 3), ("finish", 3)] + [("tick", 3), ("finish", 3)] * 3,
        [0, 1, 2, 3],
        [],
    ),
    (
        "buffer_all past its bound: the oldest slots are skipped",
        {"overlap": "buffer_all"},
        [("tick", 0), ("tick", lim.MAX_BUFFERED_RUNS + 5), ("finish", 200), ("tick", 200)],
        [0, 6],
        [(1, 5, "buffer_full")],
    ),
    (
        "skip with catchup=False: slots due during a run are overlap, the first gap catchup",
        {"overlap": "skip", "catchup": False},
        [("tick", 2), ("tick", 5), ("finish", 5.5), ("tick", 6)],
        [2, 6],
        [(0, 1, "catchup"), (3, 5, "overlap")],
    ),
    (
        "buffer_one with catchup=False keeps the newest slot through the run",
        {"overlap": "buffer_one", "catchup": False},
        [("tick", 2), ("tick", 5), ("finish", 5.5), ("tick", 5.5)],
        [2, 5],
        [(0, 1, "catchup"), (3, 4, "overlap")],
    ),
    (
        "buffer_all with catchup=False keeps its buffer once the DAG has run",
        {"overlap": "buffer_all", "catchup": False},
        [("tick", 2), ("tick", 4), ("finish", 4)] + [("tick", 4), ("finish", 4)] * 2,
        [2, 3, 4],
        [(0, 1, "catchup")],
    ),
    (
        "catchup_window: older missed slots are skipped, newer ones run",
        {"catchup_window_seconds": 2 * 3600.0},
        [("tick", 10)],
        [8, 9, 10],
        [(0, 7, "catchup_window")],
    ),
    (
        "a window shorter than the period: a slot missed by more than it is skipped",
        {"catchup_window_seconds": 1800.0},
        [("tick", 10.75)],
        [],
        [(0, 10, "catchup_window")],
    ),
    (
        "catchup=False: only the latest slot runs, the others are recorded",
        {"catchup": False},
        [("tick", 10)],
        [10],
        [(0, 9, "catchup")],
    ),
    (
        "catchup_window of zero is catchup=False with its own reason",
        {"catchup_window_seconds": 0.0},
        [("tick", 5)],
        [5],
        [(0, 4, "catchup_window")],
    ),
    (
        "max_runs: scheduling stops after N scheduled runs",
        {"max_runs": 2},
        [("tick", 0), ("tick", 1), ("finish", 1), ("tick", 5), ("tick", 9)],
        [0, 1],
        [],
    ),
    (
        "max_runs counts runs, not skipped slots",
        {"max_runs": 2, "catchup": False},
        [("tick", 3), ("finish", 3), ("tick", 6), ("tick", 9)],
        [3, 6],
        [(0, 2, "catchup"), (4, 5, "catchup")],
    ),
]


@pytest.mark.parametrize(("fields", "steps", "want_runs", "want_skips"), [c[1:] for c in CASES])
def test_policy_scenarios(
    fields: dict[str, Any], steps: list[Any], want_runs: list[float], want_skips: list[Any]
) -> None:
    sim = Sim()
    assert sim.register(hourly(**fields)).value[0].ok
    for step, hour in steps:
        if step == "tick":
            tick(sim, h(hour))
        else:
            finish_all(sim, h(hour))
    assert runs(sim) == want_runs
    assert skipped(sim) == want_skips


def test_without_policies_or_skip_records_the_plan_is_the_previous_release() -> None:
    sim = Sim()
    sim.register(hourly(catchup=False))
    decisions = tick(sim, h(10), record_skips=False)
    assert [d.skip_reason for d in decisions] == [""]  # no skip decision in a mixed cluster
    assert runs(sim) == [10] and skipped(sim) == []
    assert sim.state.dags["d"].scheduled_runs == 0  # counted only under max_runs


def test_max_runs_leaves_manual_runs_alone_and_the_dag_has_no_wakeup() -> None:
    sim = Sim()
    sim.register(hourly(max_runs=1))
    tick(sim, h(0))
    due = DueIndex()
    rec = sim.state.dags["d"]
    due.upsert(rec.spec, last_logical_date=rec.last_logical_date, paused=False, scheduled_runs=1)
    assert due.next_wakeup() is None
    assert sim.create("d", h(1), now=h(1)).value[0].reason == r.MAX_RUNS
    assert sim.create("d", h(1), run_type=RunType.MANUAL, now=h(1)).value[0].ok


def skip(first: float, last: float, reason: str) -> c.RunDecision:
    return c.RunDecision("d", h(last), h(first), h(last), skip_reason=reason)


# apply re-checks each skip against the committed spec: (fields, runs first, decision, reason)
REFUSALS = [
    ({}, False, skip(1, 2, "overlap"), r.POLICY),  # allow_all skips nothing
    ({"overlap": "skip"}, False, skip(1, 2, "overlap"), r.POLICY),  # no active run
    ({"overlap": "buffer_all"}, True, skip(1, 2, "overlap"), r.POLICY),
    ({"overlap": "skip"}, True, skip(1, 2, "buffer_full"), r.POLICY),
    ({"catchup_window_seconds": 7200.0}, False, skip(1, 4, "catchup_window"), r.POLICY),
    ({"catchup": True}, False, skip(1, 2, "catchup"), r.POLICY),
    ({"overlap": "skip"}, True, skip(0, 2, "overlap"), r.RUN_EXISTS),  # slot 0 ran
    ({"overlap": "skip"}, True, skip(3, 2, "overlap"), r.INVALID),  # first after last
    ({"overlap": "skip"}, True, skip(1, 9, "overlap"), r.INVALID),  # in the future
    ({"overlap": "skip"}, True, skip(1, 2, "bored"), r.INVALID),
]


@pytest.mark.parametrize(("fields", "run_first", "decision", "reason"), REFUSALS)
def test_apply_refuses_skips_the_policy_does_not_give(
    fields: dict[str, Any], run_first: bool, decision: c.RunDecision, reason: str
) -> None:
    sim = Sim()
    sim.register(hourly(**fields))
    if run_first:
        tick(sim, h(0))
    before = (sim.state.dags["d"], runs(sim))
    result = sim.apply(c.CreateRuns(request_id=sim.rid(), now=h(5), runs=(decision,)))
    assert [i.reason for i in result.value] == [reason]
    assert (sim.state.dags["d"], runs(sim)) == before  # a refused decision changes nothing


def test_a_one_at_a_time_policy_refuses_a_second_active_run() -> None:
    sim = Sim()
    sim.register(hourly(overlap="buffer_all", max_active_runs=5))
    tick(sim, h(0))
    assert sim.create("d", h(1), now=h(1)).value[0].reason == r.MAX_ACTIVE_RUNS


def test_skipped_ranges_are_bounded_and_survive_snapshot_and_restore() -> None:
    sim = Sim()
    sim.register(hourly(overlap="skip"))
    tick(sim, h(0))
    for hour in range(1, lim.MAX_SKIP_RECORDS + 10):
        tick(sim, h(hour))
    ranges = sim.state.dags["d"].skipped
    assert len(ranges) == lim.MAX_SKIP_RECORDS
    assert (ranges[-1].first, ranges[-1].last) == (h(lim.MAX_SKIP_RECORDS + 9),) * 2
    snap = sim.state.snapshot()
    restored = SchedulerState.restore(json.loads(json.dumps(snap)))
    assert restored.snapshot() == snap
    assert restored.digest() == sim.state.digest() == sim.state.recompute_digest()


def test_policy_fields_at_their_default_leave_the_spec_hash_alone() -> None:
    plain = hourly()
    assert plain.to_dict() == hourly(overlap="", max_runs=None).to_dict()
    assert "overlap" not in plain.to_dict() and "max_runs" not in plain.to_dict()
    assert hourly(overlap="skip").compute_hash() != plain.compute_hash()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"overlap": "sometimes"}, "overlap"),
        ({"max_runs": 0}, "max_runs"),
        ({"catchup_window_seconds": -1.0}, "catchup_window_seconds"),
    ],
)
def test_register_refuses_bad_policy_fields(fields: dict[str, Any], message: str) -> None:
    sim = Sim()
    item = sim.register(hourly(**fields)).value[0]
    assert item.reason == r.INVALID and message in str(item.value)


def test_jitter_delays_each_run_to_its_planned_start_the_same_on_every_replica() -> None:
    spec = hourly(jitter_seconds=1800.0)
    starts = [planned_start(spec, h(i)) - h(i) for i in range(50)]
    assert all(timedelta(0) <= d <= timedelta(minutes=30) for d in starts)
    assert len(set(starts)) > 40  # spread, not one delay for all
    assert starts == [planned_start(hourly(jitter_seconds=1800.0), h(i)) - h(i) for i in range(50)]
    other = replace(spec, dag_id="e")
    assert [planned_start(other, h(i)) for i in range(5)] != [h(i) + starts[i] for i in range(5)]
    sim = Sim()
    sim.register(spec)
    start = planned_start(spec, h(0))
    assert tick(sim, start - timedelta(microseconds=1)) == []  # the slot is due, its run is not
    assert sim.create("d", h(0), now=start - timedelta(microseconds=1)).value[0].reason == (
        r.NOT_DUE
    )
    due = DueIndex()
    due.upsert(sim.state.dags["d"].spec, last_logical_date=None, paused=False)
    assert due.next_wakeup() == start  # the leader wakes at the planned start
    assert [d.logical_date for d in tick(sim, start)] == [h(0)]


# -- properties -------------------------------------------------------------------------------

steps = st.lists(
    st.tuples(st.sampled_from(["tick", "finish"]), st.integers(min_value=0, max_value=7)),
    min_size=1,
    max_size=25,
)


def covered(sim: Sim) -> list[datetime]:
    """Every slot the schedule passed, from runs and skipped ranges (hourly slots)."""
    slots = [run.logical_date for run in sim.state.runs("d")]
    for s in sim.state.dags["d"].skipped:
        hour = s.first
        while hour <= s.last:
            slots.append(hour)
            hour += HOUR
    return sorted(slots)


def drive(sim: Sim, plan: list[tuple[str, int]], check: Any) -> datetime:
    now = T0
    for step, minutes in plan:
        now += timedelta(minutes=minutes * 20)  # 0-140 minutes: several slots at once, or none
        if step == "tick":
            tick(sim, now)
        else:
            finish_all(sim, now)
        check(sim)
    return now


@settings(max_examples=60, deadline=None)
@given(steps)
def test_buffer_all_never_loses_a_slot(plan: list[tuple[str, int]]) -> None:
    sim = Sim()
    sim.register(hourly(overlap="buffer_all"))
    drive(sim, plan, lambda s: None)
    last = sim.state.dags["d"].last_logical_date
    slots = covered(sim)
    # every slot up to the schedule's position ran, once, in order; none was skipped (the
    # buffer's bound is far off)
    assert slots == [T0 + i * HOUR for i in range(len(slots))]
    assert not slots or slots[-1] == last
    assert not sim.state.dags["d"].skipped


@settings(max_examples=60, deadline=None)
@given(steps, st.sampled_from(["skip", "buffer_one", "cancel_other", "terminate_other"]))
def test_one_at_a_time_policies_never_overlap_and_account_for_every_slot(
    plan: list[tuple[str, int]], policy: str
) -> None:
    sim = Sim()
    sim.register(hourly(overlap=policy))

    def one_at_a_time(s: Sim) -> None:
        assert s.state.active_run_count("d") <= 1

    drive(sim, plan, one_at_a_time)
    slots = covered(sim)
    assert slots == [T0 + i * HOUR for i in range(len(slots))]  # each slot once: ran or skipped


# -- DAG files --------------------------------------------------------------------------------


def test_dag_files_set_the_policies_and_defaults_leave_the_spec_as_before() -> None:
    from raftsched import DAG, BashTask

    def build(**kw: Any) -> Any:
        with DAG("p", schedule="@hourly", start_date=T0, **kw) as d:
            BashTask(task_id="a", command="true")
        return d.to_spec()

    spec = build(
        overlap="buffer_one",
        catchup_window=timedelta(hours=6),
        max_runs=3,
        jitter=timedelta(minutes=5),
        pause_on_failure=True,
    )
    assert spec.pause_on_failure
    assert (spec.overlap, spec.catchup_window_seconds, spec.max_runs, spec.jitter_seconds) == (
        "buffer_one",
        6 * 3600.0,
        3,
        300.0,
    )
    assert build(overlap="allow_all").spec_hash == build().spec_hash


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"overlap": "cancel_everything"}, "overlap of DAG 'p' must be one of"),
        ({"overlap": 3}, "overlap of DAG 'p' must be one of"),
        ({"max_runs": 0}, "max_runs of DAG 'p' must be an integer >= 1"),
        ({"max_runs": True}, "max_runs of DAG 'p' must be an integer >= 1"),
        ({"catchup_window": "1h"}, "catchup_window of DAG 'p' must be a timedelta"),
        ({"jitter": timedelta(days=-1)}, "jitter of DAG 'p' must be zero or more"),
        ({"pause_on_failure": "yes"}, "pause_on_failure of DAG 'p' must be True or False"),
    ],
)
def test_dag_files_get_clear_errors_for_bad_policies(kw: dict[str, Any], message: str) -> None:
    from raftsched import DAG
    from raftsched.errors import DagDefinitionError

    with pytest.raises(DagDefinitionError, match=message):
        DAG("p", schedule="@hourly", start_date=T0, **kw)


# -- pause on failure and pause notes ----------------------------------------------------------


def test_a_failed_run_pauses_a_pause_on_failure_dag_with_a_note_naming_it() -> None:
    sim = Sim()
    sim.register(hourly(pause_on_failure=True, max_active_runs=2))
    tick(sim, h(1))  # slots 0 and 1
    grants = sim.lease(n=2, now=h(1))
    assert sim.complete(grants[0], success=True, now=h(1)).ok
    assert not sim.state.dags["d"].paused  # a success pauses nothing
    assert sim.complete(grants[1], success=False, now=h(1)).ok
    record = sim.state.dags["d"]
    failed = grants[1].lease.key.run_id
    assert record.paused and record.pause_note == f"paused after run {failed} failed"
    assert sim.outbox("dag")[-1]["paused"] is True
    assert tick(sim, h(5)) == []  # paused: nothing scheduled
    sim.apply(c.SetPaused(request_id=sim.rid(), now=h(5), dag_id="d", paused=False))
    assert sim.state.dags["d"].pause_note == ""


def test_a_failure_with_retries_left_does_not_pause_and_other_dags_do_not() -> None:
    sim = Sim()
    spec = hourly(pause_on_failure=True)
    sim.register(replace(spec, tasks=(task("a", retries=1),)))
    tick(sim, h(0))
    assert sim.complete(sim.lease(now=h(0))[0], success=False, now=h(0)).ok
    assert not sim.state.dags["d"].paused  # up for retry
    plain = Sim()
    plain.register(hourly())
    tick(plain, h(0))
    assert plain.complete(plain.lease(now=h(0))[0], success=False, now=h(0)).ok
    assert not plain.state.dags["d"].paused and plain.state.dags["d"].pause_note == ""


def test_pause_notes_are_kept_bounded_and_digested_only_when_set() -> None:
    sim = Sim()
    sim.register(hourly())
    plain = sim.state.recompute_digest()
    pause = c.SetPaused(request_id="p1", now=h(1), dag_id="d", paused=True, note="db migration")
    assert sim.apply(pause).ok
    assert sim.state.dags["d"].pause_note == "db migration"
    again = c.SetPaused(request_id="p2", now=h(2), dag_id="d", paused=True, note="still")
    assert sim.apply(again).reason == ""  # a new note on a paused DAG is a change
    assert sim.state.dags["d"].pause_note == "still"
    snap = sim.state.snapshot()
    assert SchedulerState.restore(json.loads(json.dumps(snap))).snapshot() == snap
    assert sim.state.digest() == sim.state.recompute_digest() != plain
    note = "x" * (lim.MAX_PAUSE_NOTE_CHARS + 1)
    long = c.SetPaused(request_id="p3", now=h(3), dag_id="d", paused=True, note=note)
    assert sim.apply(long).reason == r.INVALID
    sim.apply(c.SetPaused(request_id="p4", now=h(4), dag_id="d", paused=False))
    assert sim.state.dags["d"].pause_note == ""


# -- cancel_other and terminate_other ----------------------------------------------------------


def test_terminate_other_kills_the_active_run_and_starts_in_the_same_entry() -> None:
    sim = Sim()
    sim.register(hourly(overlap="terminate_other", pause_on_failure=True))
    tick(sim, h(0))
    [grant] = sim.lease(now=h(0))
    [decision] = tick(sim, h(1))
    assert decision.end_active == "terminate" and decision.logical_date == h(1)
    old = sim.state.run("d", grant.lease.key.run_id)
    assert old is not None and old.state.value == "failed"
    ti = sim.ti("a", run=grant.lease.key.run_id)
    assert ti.state.value == "failed" and ti.message == "ended by the DAG's overlap policy"
    ref = c.LeaseRef(grant.lease.key, grant.lease.token)
    beat = sim.apply(c.HeartbeatLeases(request_id="hb", now=h(1), worker_id="w1", leases=(ref,)))
    assert [i.ok for i in beat.value] == [False]  # the worker is told to kill the attempt
    assert runs(sim) == [0, 1] and sim.state.active_run_count("d") == 1
    assert not sim.state.dags["d"].paused  # ended by the policy: not a failure


def test_cancel_other_lets_the_running_attempt_end_then_starts() -> None:
    sim = Sim()
    spec = hourly(overlap="cancel_other")
    sim.register(replace(spec, tasks=(task("a", retries=3), task("b", "a"))))
    tick(sim, h(0))
    [grant] = sim.lease(now=h(0))
    [decision] = tick(sim, h(1))
    assert decision.end_active == "cancel"
    first = grant.lease.key.run_id
    assert sim.ti("b", run=first).state.value == "failed"  # not started: cancelled
    assert sim.ti("a", run=first).state.value == "running"  # left to end, without a retry
    assert runs(sim) == [0]  # the slot waits for the cancelled run
    assert sim.complete(grant, success=False, now=h(1.2)).ok
    assert sim.ti("a", run=first).state.value == "failed"  # no retry after it
    assert sim.state.active_run_count("d") == 0
    tick(sim, h(1.2))
    assert runs(sim) == [0, 1]


@pytest.mark.parametrize("how", ["cancel", "terminate"])
def test_apply_refuses_to_end_runs_the_policy_does_not_end(how: str) -> None:
    sim = Sim()
    sim.register(hourly(overlap="skip"))
    tick(sim, h(0))
    before = (sim.state.dags["d"], runs(sim), sim.states("d", run=None))
    decision = c.RunDecision("d", h(1), h(0), h(1), end_active=how)
    result = sim.apply(c.CreateRuns(request_id=sim.rid(), now=h(1), runs=(decision,)))
    assert [i.reason for i in result.value] == [r.POLICY]
    assert (sim.state.dags["d"], runs(sim), sim.states("d", run=None)) == before


def test_overlap_ranges_are_counted_and_long_catchup_gaps_are_not() -> None:
    sim = Sim()
    sim.register(hourly(overlap="skip", catchup=False))
    tick(sim, h(200))  # 200 slots missed before the first run: not enumerated
    tick(sim, h(203))  # three slots during the run
    gap, overlap = sim.state.dags["d"].skipped
    assert (gap.reason, gap.count) == ("catchup", 0)
    assert (overlap.reason, overlap.count) == ("overlap", 3)


def test_on_skipped_callback_makes_one_job_per_committed_range() -> None:
    sim = Sim()
    spec = hourly(overlap="skip", callbacks=(("skipped", "alert", "{}"),))
    sim.register(spec)
    tick(sim, h(0))
    tick(sim, h(2))  # slots 1-2 skipped
    tick(sim, h(2))  # nothing new: no job
    [job] = list(sim.state.callbacks.jobs())
    context = json.loads(job.context_json)
    assert job.event == "skipped" and job.callable_ref == "alert"
    assert job.run_id == f"skipped__{h(2).isoformat()}"
    assert (context["first_slot"], context["last_slot"], context["slots"]) == (
        h(1).isoformat(),
        h(2).isoformat(),
        2,
    )
    assert context["reason"] == "overlap"
    plain = Sim()
    plain.register(hourly(overlap="skip"))
    tick(plain, h(0))
    tick(plain, h(2))
    assert not list(plain.state.callbacks.jobs())  # no callback, no job
    from raftsched import DAG, BashTask
    from raftsched.notifiers import WebhookNotifier

    hook = WebhookNotifier(url="http://127.0.0.1:9/x", text="{dag_id} {event}")
    with DAG("cb", schedule="@hourly", start_date=T0, on_skipped_callback=hook) as d:
        BashTask("a", command="true")
    assert [(e, ref) for e, ref, _ in d.to_spec().callbacks] == [("skipped", "raftsched:webhook")]


def test_each_skipped_range_goes_to_the_outbox_for_the_db() -> None:
    sim = Sim()
    sim.register(hourly(overlap="skip"))
    tick(sim, h(0))
    tick(sim, h(2))
    [row] = sim.outbox("skipped_slots")
    assert row == {
        "dag_id": "d",
        "first": h(1).isoformat(),
        "last": h(2).isoformat(),
        "count": 2,
        "reason": "overlap",
        "at": h(2).isoformat(),
    }
    from raftsched.store.materializer import skipped_row

    assert skipped_row(row)["last_slot"] == h(2) and skipped_row(row)["slots"] == 2
