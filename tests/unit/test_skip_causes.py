"""Why missed slots were missed (core/skip_causes.py): not parsed yet, paused, no leader. A
catch-up skip is split by cause from committed facts, bounded however long the stretch;
apply re-checks each cause; catchup=True still runs every missed slot."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_state_harness import T0, Sim, dag, task

from raftsched.core import commands as c
from raftsched.core import explain as ex
from raftsched.core import results as r
from raftsched.core import skip_causes as sc
from raftsched.core.due import DueIndex, due_fields
from raftsched.core.limits import MAX_SKIP_RECORDS
from raftsched.core.model import Schedule, ScheduleKind
from raftsched.core.slot_policy import max_active
from raftsched.core.state import SchedulerState

MIN = timedelta(minutes=1)
YEAR = timedelta(days=365)


def m(minutes: float) -> datetime:
    return T0 + minutes * MIN


def every_minute(**kw: Any) -> Any:
    spec = dag("d", task("a"), start_date=T0, **kw)
    return replace(spec, schedule=Schedule(ScheduleKind.INTERVAL, interval_seconds=60))


def sim3() -> Sim:
    """A state at cluster version 3 (the release that records gaps)."""
    sim = Sim()
    sim.state.cluster_version = 3
    return sim


def tick(sim: Sim, now: datetime, leader_gap: sc.Gap | None = None) -> list[c.RunDecision]:
    """A leader tick from the committed state (fresh DueIndex, as after an election)."""
    due = DueIndex()
    for rec in sim.state.dags.values():
        due.upsert(rec.spec, **due_fields(rec))

    def capacity(dag_id: str) -> int:
        return max_active(sim.state.dags[dag_id].spec) - sim.state.active_run_count(dag_id)

    decisions = due.collect(
        now, capacity=capacity, limit=100, record_skips=True, leader_gap=leader_gap
    )
    if decisions:
        result = sim.apply(c.CreateRuns(request_id=sim.rid(), now=now, runs=tuple(decisions)))
        assert all(item.ok for item in result.value), result
    return decisions


def pause(sim: Sim, paused: bool, now: datetime) -> None:
    result = sim.apply(c.SetPaused(request_id=sim.rid(), now=now, dag_id="d", paused=paused))
    assert result.ok


def skips(sim: Sim) -> list[tuple[float, float, int, str]]:
    return [
        ((s.first - T0) / MIN, (s.last - T0) / MIN, s.count, s.reason)
        for s in sim.state.dags["d"].skipped
    ]


def runs(sim: Sim) -> list[float]:
    return sorted((run.logical_date - T0) / MIN for run in sim.state.runs("d"))


def finish_all(sim: Sim, now: datetime) -> None:
    for grant in sim.lease(n=100, now=now):
        assert sim.complete(grant, now=now).ok


def test_slots_before_the_first_commit_are_not_parsed_under_catchup_false() -> None:
    sim = sim3()
    sim.register(every_minute(catchup=False), now=m(10))
    tick(sim, m(10))
    assert skips(sim) == [(0, 9, 10, "not_parsed")]
    assert runs(sim) == [10]


def test_catchup_true_runs_the_slots_before_the_first_commit() -> None:
    sim = sim3()
    sim.register(every_minute(catchup=True), now=m(3))
    tick(sim, m(3))
    assert skips(sim) == [] and runs(sim) == [0, 1, 2, 3]


def test_a_year_paused_is_one_range_record_and_one_callback_job() -> None:
    sim = sim3()
    spec = every_minute(catchup=False, callbacks=(("skipped", "alert", "{}"),))
    sim.register(spec, now=T0)
    tick(sim, T0)
    finish_all(sim, T0)
    pause(sim, True, m(0.5))
    back = T0 + YEAR
    pause(sim, False, back)
    entries = len(sim.log)
    decisions = tick(sim, back)
    assert len(sim.log) == entries + 1  # one CreateRuns entry
    assert [d.skip_reason for d in decisions] == ["paused", ""]
    slots = int(YEAR / MIN)  # 525,600: the slots after T0 up to the unpause, less the one run
    assert skips(sim) == [(1, slots - 1, slots - 1, "paused")]
    assert runs(sim) == [0, slots]
    [job] = [j for j in sim.state.callbacks.jobs() if j.event == "skipped"]
    assert '"reason": "paused"' in job.context_json
    [row] = sim.outbox("skipped_slots")
    assert (row["reason"], row["count"]) == ("paused", slots - 1)
    answer = ex.explain(sim.state.dags["d"], m(1000), back)
    assert answer.verdict == ex.SKIPPED
    assert "skipped (paused) with 525,599 slots from" in answer.detail


def test_unpaused_with_catchup_true_runs_what_it_missed() -> None:
    sim = sim3()
    sim.register(every_minute(catchup=True), now=T0)
    tick(sim, T0)
    finish_all(sim, T0)
    pause(sim, True, m(0.5))
    pause(sim, False, m(3))
    tick(sim, m(3))
    assert skips(sim) == [] and runs(sim) == [0, 1, 2, 3]


def test_a_pause_and_a_leaderless_stretch_split_one_catchup_gap() -> None:
    sim = sim3()
    sim.register(every_minute(catchup=False), now=T0)
    tick(sim, T0)
    finish_all(sim, T0)
    pause(sim, True, m(0.5))
    pause(sim, False, m(5.5))
    # the leader that should have ticked at the unpause died; the next took over at m(20)
    gap = sc.leader_gap(m(5.5), m(20))
    tick(sim, m(20), leader_gap=gap)
    assert skips(sim) == [(1, 5, 5, "paused"), (6, 19, 14, "leader_unavailable")]
    assert runs(sim) == [0, 20]


def test_a_catchup_window_keeps_the_recent_missed_slots_and_labels_the_old_ones() -> None:
    sim = sim3()
    sim.register(every_minute(catchup_window_seconds=180), now=T0)
    tick(sim, T0)
    finish_all(sim, T0)
    gap = sc.leader_gap(m(0.1), m(10))
    tick(sim, m(10), leader_gap=gap)
    assert skips(sim) == [(1, 6, 6, "leader_unavailable")]
    assert runs(sim) == [0, 7, 8, 9, 10]


def test_a_short_election_is_no_leaderless_stretch() -> None:
    assert sc.leader_gap(T0, T0 + sc.LEADER_GAP_TOLERANCE) is None
    assert sc.leader_gap(T0, T0 + 2 * sc.LEADER_GAP_TOLERANCE) is not None


def test_a_state_below_release_3_records_no_gaps_and_labels_nothing() -> None:
    sim = Sim()  # cluster version 1: states and digests as the previous releases'
    sim.register(every_minute(catchup=False), now=m(3))
    pause(sim, True, m(3))
    assert sim.state.dags["d"].gaps == ()
    pause(sim, False, m(3))
    tick(sim, m(3))
    assert skips(sim) == [(0, 2, 3, "catchup")]


@pytest.mark.parametrize(
    ("fields", "reason", "first", "last", "why"),
    [
        ({"catchup": True}, "paused", 1, 2, "the DAG catches up"),
        ({"catchup": True}, "leader_unavailable", 1, 2, "the DAG catches up"),
        ({"catchup": False}, "paused", 6, 7, "no committed paused stretch"),
        ({"catchup": False}, "not_parsed", 1, 2, "no committed not_parsed stretch"),
        ({"catchup_window_seconds": 3600}, "leader_unavailable", 1, 2, "catch-up window"),
    ],
)
def test_apply_refuses_a_cause_the_committed_facts_do_not_give(
    fields: dict[str, Any], reason: str, first: float, last: float, why: str
) -> None:
    sim = sim3()
    sim.register(every_minute(**fields), now=T0)
    tick(sim, T0)
    pause(sim, True, m(0.5))
    pause(sim, False, m(5))
    before = sim.state.dags["d"]
    decision = c.RunDecision(
        "d", m(last), m(first), m(last), skip_reason=reason, skipped_slots=int(last - first + 1)
    )
    result = sim.apply(c.CreateRuns(request_id=sim.rid(), now=m(10), runs=(decision,)))
    [item] = result.value
    assert item.reason == r.POLICY and why in item.value
    assert sim.state.dags["d"] == before


def test_gaps_are_bounded_digested_and_survive_snapshot_and_restore() -> None:
    sim = sim3()
    sim.register(every_minute(), now=T0)
    plain = sim.state.digest()
    for i in range(sc.MAX_GAPS + 3):
        pause(sim, True, m(i))
        pause(sim, False, m(i + 0.5))
    gaps = sim.state.dags["d"].gaps
    assert len(gaps) == sc.MAX_GAPS and all(g.cause == "paused" and g.end for g in gaps)
    assert sim.state.digest() != plain
    back = SchedulerState.restore(sim.state.snapshot())
    assert back.dags["d"].gaps == gaps and back.digest() == sim.state.digest()


def test_explain_says_since_when_a_dag_is_paused() -> None:
    sim = sim3()
    sim.register(every_minute(), now=T0)
    pause(sim, True, m(2))
    answer = ex.explain(sim.state.dags["d"], m(3), m(3))
    assert answer.verdict == ex.PAUSED and f"paused since {m(2).isoformat()}" in answer.detail


_minutes = st.integers(min_value=0, max_value=200)
_gap = st.tuples(
    st.sampled_from(sc.CAUSES), st.one_of(st.none(), _minutes), st.one_of(st.none(), _minutes)
)


@settings(max_examples=200, deadline=None)
@given(_minutes, _minutes, st.lists(_gap, max_size=6))
def test_split_labels_every_instant_with_its_strongest_cause(
    a: int, b: int, raw: list[tuple[str, int | None, int | None]]
) -> None:
    first, last = m(min(a, b)), m(max(a, b))
    gaps = tuple(
        sc.Gap(cause, None if lo is None else m(lo), None if hi is None else m(hi))
        for cause, lo, hi in raw
    )
    pieces = sc.split(first, last, "catchup", gaps)
    assert len(pieces) <= 3 * len(gaps) + 1
    # consecutive, covering first..last exactly, no two neighbours with one label
    assert pieces[0][0] == first and pieces[-1][1] == last
    for (_, end, label), (start, _, other) in pairwise(pieces):
        assert start == end + timedelta(microseconds=1) and label != other
    for minute in range(min(a, b), max(a, b) + 1):
        when = m(minute)
        [label] = [p[2] for p in pieces if p[0] <= when <= p[1]]
        holding = [
            g.cause
            for g in gaps
            if (g.start is None or g.start <= when) and (g.end is None or when <= g.end)
        ]
        want = min(holding, key=sc.CAUSES.index) if holding else "catchup"
        assert label == want


_ops = st.lists(
    st.tuples(st.sampled_from(["tick", "pause", "unpause", "outage", "finish"]), st.integers(1, 7)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=80, deadline=None)
@given(_ops, st.sampled_from([{"catchup": False}, {"catchup_window_seconds": 150}]))
def test_every_slot_is_run_or_skipped_once_and_causes_match_the_facts(
    ops: list[tuple[str, int]], fields: dict[str, Any]
) -> None:
    """Ticks, pauses, unpauses and leaderless stretches in any order: every slot up to the
    schedule's position is a run or inside exactly one skipped range; a "paused" range lies
    inside a pause, a "leader_unavailable" one inside an outage, "not_parsed" before the
    registration."""
    sim = sim3()
    registered = m(3)
    sim.register(every_minute(max_active_runs=1000, **fields), now=registered)
    now, paused, pauses, outages = registered, False, [], []
    gap: sc.Gap | None = None
    for op, minutes in ops:
        now += minutes * MIN
        if op == "pause" and not paused:
            pause(sim, True, now)
            paused, pauses = True, [*pauses, (now, None)]
        elif op == "unpause" and paused:
            pause(sim, False, now)
            paused, pauses = False, [*pauses[:-1], (pauses[-1][0], now)]
        elif op == "outage":  # no commit from `now` on, then a new leader's first tick
            gap = sc.leader_gap(sim.state.clock, now + minutes * MIN)
            outages.append((sim.state.clock, now + minutes * MIN))
            now += minutes * MIN
            tick(sim, now, leader_gap=gap)
        elif op == "finish":
            finish_all(sim, now)
        else:
            tick(sim, now, leader_gap=gap)
    record = sim.state.dags["d"]
    if record.last_logical_date is None or len(record.skipped) >= MAX_SKIP_RECORDS:
        return  # nothing yet, or older ranges no longer kept
    slots = int((record.last_logical_date - T0) / MIN) + 1
    seen = [0] * slots
    for minute in runs(sim):
        seen[int(minute)] += 1
    for s in record.skipped:  # every range is kept
        first, last = int((s.first - T0) / MIN), int((s.last - T0) / MIN)
        assert s.count == last - first + 1
        for i in range(first, last + 1):
            seen[i] += 1
        inside = {
            "paused": [(a, b or now) for a, b in pauses],
            "leader_unavailable": outages,
            "not_parsed": [(T0, registered)],
        }.get(s.reason)
        if inside is not None:
            assert any(a <= s.first and s.last <= b for a, b in inside), (s, inside)
    assert seen == [1] * slots, seen
