"""Which leader term created a scheduled run (core/run_terms.py): the leader stamps its
CreateRuns with (term, leader id) from cluster version 3; each DAG keeps one record per term
that created its runs (bounded), and `dags explain` names the term of any slot's run."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_state_harness import T0, Sim, dag, task

from raftsched.core import commands as c
from raftsched.core import explain as ex
from raftsched.core import results as r
from raftsched.core import run_terms as rt
from raftsched.core import versions as vs
from raftsched.core.model import Schedule, ScheduleKind
from raftsched.core.state import SchedulerState

MIN = timedelta(minutes=1)


def m(minutes: int) -> datetime:
    return T0 + minutes * MIN


def setup() -> Sim:
    sim = Sim()
    sim.state.cluster_version = 3
    spec = dag("d", task("a"), start_date=T0, catchup=True, max_active_runs=1000)
    sim.register(replace(spec, schedule=Schedule(ScheduleKind.INTERVAL, interval_seconds=60)))
    return sim


def create(sim: Sim, minute: int, leader: tuple) -> r.Result:
    decision = c.RunDecision("d", m(minute), m(minute - 1), m(minute))
    cmd = c.CreateRuns(request_id=sim.rid(), now=m(minute), runs=(decision,), leader=leader)
    return sim.apply(cmd)


def test_each_term_that_creates_runs_is_recorded_once_and_explain_names_it() -> None:
    sim = setup()
    for minute in range(3):
        assert create(sim, minute, (7, "10.0.0.1:7001")).value[0].ok
    for minute in range(3, 5):
        assert create(sim, minute, (9, "10.0.0.2:7001")).value[0].ok
    terms = sim.state.dags["d"].terms
    assert [(t.first, t.term, t.leader) for t in terms] == [
        (m(0), 7, "10.0.0.1:7001"),
        (m(3), 9, "10.0.0.2:7001"),
    ]
    record = sim.state.dags["d"]
    for minute, term in ((1, 7), (4, 9)):
        run = sim.run(run=f"scheduled__{m(minute).isoformat()}")
        answer = ex.explain(record, m(minute), m(10), run=run)
        assert answer.verdict == ex.CREATED
        assert f"by leader term {term} (leader 10.0.0." in answer.detail


def test_runs_of_an_unstamped_command_and_manual_runs_record_nothing() -> None:
    sim = setup()
    assert create(sim, 0, ()).value[0].ok
    assert sim.state.dags["d"].terms == ()
    run = sim.run(run=f"scheduled__{m(0).isoformat()}")
    assert "leader term" not in ex.explain(sim.state.dags["d"], m(0), m(1), run=run).detail


def test_records_are_bounded_and_older_slots_say_so() -> None:
    sim = setup()
    for minute in range(rt.MAX_TERM_RECORDS + 5):
        assert create(sim, minute, (minute + 1, "")).value[0].ok
    terms = sim.state.dags["d"].terms
    assert len(terms) == rt.MAX_TERM_RECORDS and terms[0].first == m(5)
    assert rt.describe(rt.term_of(terms, m(2))) == "by a leader term no longer kept"
    assert rt.describe(rt.term_of(terms, m(7))) == "by leader term 8"


@pytest.mark.parametrize(
    "leader",
    [(0, "a"), (1,), ("1", "a"), (1, "x" * 201), (1, "a\nb"), [1, "a"], (True, "a")],
)
def test_apply_refuses_a_bad_leader_stamp(leader: object) -> None:
    sim = setup()
    before = sim.state.dags["d"]
    result = create(sim, 0, leader)  # type: ignore[arg-type]
    assert not result.ok and result.reason == r.INVALID
    assert sim.state.dags["d"] == before and not list(sim.state.runs("d"))


def test_the_gate_refuses_a_stamp_before_cluster_version_3() -> None:
    decision = c.RunDecision("d", m(0), m(-1), m(0))
    stamped = c.CreateRuns(request_id="x", now=m(0), runs=(decision,), leader=(3, "n"))
    assert vs.refusal(stamped, 2) is not None
    assert vs.refusal(replace(stamped, leader=()), 2) is None
    assert vs.refusal(stamped, 3) is None


def test_terms_are_digested_and_survive_snapshot_and_restore() -> None:
    sim = setup()
    assert create(sim, 0, ()).value[0].ok
    plain = sim.state.digest()
    assert create(sim, 1, (4, "n1")).value[0].ok
    assert sim.state.digest() != plain
    back = SchedulerState.restore(sim.state.snapshot())
    assert back.dags["d"].terms == sim.state.dags["d"].terms
    assert back.digest() == sim.state.digest()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=40))
def test_every_kept_slot_names_the_term_that_created_it(steps: list[int]) -> None:
    """Terms only grow in a Raft log; each run is created by the current one."""
    sim = setup()
    term, made = 1, {}
    for minute, step in enumerate(steps):
        term += step - 1  # a step of 1 keeps the term
        assert create(sim, minute, (term, f"n{term % 3}")).value[0].ok
        made[minute] = term
    terms = sim.state.dags["d"].terms
    for minute, want in made.items():
        found = rt.term_of(terms, m(minute))
        if m(minute) >= terms[0].first:
            assert found is not None and found.term == want
        else:
            assert found is None
