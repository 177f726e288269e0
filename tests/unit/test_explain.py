"""`dags explain` in the pure core (core/explain.py): one committed situation per row, the
verdict and the words that must appear in the answer."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from test_slot_policy import finish_all, h, hourly, tick
from test_state_harness import T0, Sim

from raftsched.core import commands as c
from raftsched.core import explain as ex
from raftsched.core.model import (
    DagRun,
    ImportErrorRecord,
    RunState,
    RunType,
    Schedule,
    ScheduleKind,
)
from raftsched.core.slot_policy import planned_start


def sim_with(**fields: Any) -> Sim:
    sim = Sim()
    sim.register(hourly(**fields))
    return sim


def paused(sim: Sim, note: str = "") -> Sim:
    sim.apply(c.SetPaused(request_id=sim.rid(), now=h(0), dag_id="d", paused=True, note=note))
    return sim


def ran(sim: Sim, *hours: float) -> Sim:
    for hour in hours:
        tick(sim, h(hour))
        finish_all(sim, h(hour))
    return sim


def a_run(hour: float, created: float, run_type: RunType = RunType.SCHEDULED) -> DagRun:
    run = DagRun("d", f"r{hour}", h(hour), h(hour - 1), h(hour), run_type)
    run.created_at, run.state = h(created), RunState.SUCCESS
    return run


ERROR = ImportErrorRecord("/dags/d.py", "SyntaxError: bad", "")

# (situation, state, at, now, run on the slot, import error, history_from, verdict, words)
CASES: list[tuple[str, Any, datetime, datetime, Any, Any, Any, str, list[str]]] = [
    ("never parsed", None, h(1), h(2), None, None, None, ex.UNKNOWN_DAG, ["no parsed file"]),
    ("file fails to import", None, h(1), h(2), None, ERROR, None, ex.IMPORT_ERROR, ["Syntax"]),
    (
        "before start_date",
        lambda: sim_with(),
        h(-3),
        h(2),
        None,
        None,
        None,
        ex.NO_SLOT,
        ["start_date 2024-01-01"],
    ),
    (
        "after end_date",
        lambda: sim_with(end_date=h(5)),
        h(9),
        h(10),
        None,
        None,
        None,
        ex.AFTER_END,
        ["end_date"],
    ),
    ("manual only", "manual", h(1), h(2), None, None, None, ex.MANUAL_ONLY, ["triggered"]),
    (
        "created on time",
        lambda: ran(sim_with(), 0),
        h(0),
        h(2),
        a_run(0, 0),
        None,
        None,
        ex.CREATED,
        ["scheduled run r0", "now success"],
    ),
    (
        "created late (leader unavailable past the slot)",
        lambda: ran(sim_with(), 0),
        h(0),
        h(2),
        a_run(0, 0.5),
        None,
        None,
        ex.CREATED,
        ["1800 s after its start"],
    ),
    (
        "a time between slots explains the slot before",
        lambda: ran(sim_with(), 0),
        h(0.5),
        h(2),
        a_run(0, 0),
        None,
        None,
        ex.CREATED,
        ["the slot at or before"],
    ),
    (
        "manual run on the slot",
        lambda: sim_with(),
        h(1),
        h(2),
        a_run(1, 1.5, RunType.MANUAL),
        None,
        None,
        ex.CREATED,
        ["manual run r1"],
    ),
    (
        "skipped: overlap",
        lambda: _overlapped(),
        h(2),
        h(4),
        None,
        None,
        None,
        ex.SKIPPED,
        ["skipped (overlap)"],
    ),
    (
        "skipped: outside the catch-up window",
        lambda: _ticked(sim_with(catchup_window_seconds=3600.0), 5),
        h(1),
        h(6),
        None,
        None,
        None,
        ex.SKIPPED,
        ["skipped (catchup_window)"],
    ),
    (
        "skipped: catchup=False",
        lambda: _ticked(sim_with(catchup=False), 5),
        h(2),
        h(6),
        None,
        None,
        None,
        ex.SKIPPED,
        ["skipped (catchup)"],
    ),
    (
        "not yet due",
        lambda: sim_with(),
        h(9),
        h(2),
        None,
        None,
        None,
        ex.NOT_YET_DUE,
        ["not yet due"],
    ),
    (
        "jitter: due but its planned start has not come",
        lambda: sim_with(jitter_seconds=3000.0),
        h(1),
        h(1),
        None,
        None,
        None,
        ex.NOT_YET_DUE,
        ["planned start"],
    ),
    (
        "paused, with its note",
        lambda: paused(sim_with(), "db migration"),
        h(1),
        h(2),
        None,
        None,
        None,
        ex.PAUSED,
        ["paused: db migration"],
    ),
    (
        "max_runs reached",
        lambda: ran(sim_with(max_runs=1), 0),
        h(3),
        h(4),
        None,
        None,
        None,
        ex.MAX_RUNS,
        ["made its 1 runs"],
    ),
    (
        "due, waiting",
        lambda: sim_with(),
        h(1),
        h(2),
        None,
        None,
        None,
        ex.WAITING,
        ["not created yet"],
    ),
    (
        "due, waiting, and the file now fails to import",
        lambda: sim_with(),
        h(1),
        h(2),
        None,
        ERROR,
        None,
        ex.WAITING,
        ["fails to import"],
    ),
    (
        "passed, older than what is kept",
        lambda: ran(sim_with(), 0, 1, 2),
        h(1),
        h(3),
        None,
        None,
        h(2),
        ex.PASSED,
        ["runs from 2024-01-01T02:00"],
    ),
]


def _ticked(sim: Sim, hour: float) -> Sim:
    tick(sim, h(hour))
    return sim


def _overlapped() -> Sim:
    sim = sim_with(overlap="skip")
    tick(sim, h(0))
    tick(sim, h(3))
    return sim


def _record(state: Any) -> Any:
    if state is None:
        return None
    if state == "manual":
        sim = Sim()
        spec = hourly()
        sim.register(replace(spec, schedule=Schedule(ScheduleKind.NONE, display="None")))
        return sim.state.dags["d"]
    return state().state.dags["d"]


@pytest.mark.parametrize(
    ("state", "at", "now", "run", "error", "since", "verdict", "words"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_explain_situations(
    state: Any,
    at: datetime,
    now: datetime,
    run: Any,
    error: Any,
    since: Any,
    verdict: str,
    words: list[str],
) -> None:
    answer = ex.explain(_record(state), at, now, run=run, import_error=error, history_from=since)
    assert answer.verdict == verdict, answer
    for word in words:
        assert word in answer.detail, answer


def test_every_verdict_has_a_situation() -> None:
    assert {case[7] for case in CASES} == set(ex.VERDICTS) - {ex.INACTIVE}


def test_an_inactive_dag_with_a_due_slot() -> None:
    sim = sim_with()
    sim.apply(c.RemoveDags(request_id="rm", now=h(0), dag_ids=("d",)))
    answer = ex.explain(sim.state.dags["d"], h(1), h(2))
    assert answer.verdict == ex.INACTIVE


def test_the_jittered_slot_is_due_at_its_planned_start() -> None:
    record = _record(lambda: sim_with(jitter_seconds=3000.0))
    start = planned_start(record.spec, h(1))
    assert start > h(1)
    assert ex.explain(record, h(1), start - timedelta(microseconds=1)).verdict == ex.NOT_YET_DUE
    assert ex.explain(record, h(1), start).verdict == ex.WAITING
    assert h(0) == T0


def test_a_range_only_the_db_still_holds_is_found_there() -> None:
    from raftsched.core.slot_policy import SkippedSlots

    record = _record(lambda: ran(sim_with(), 0, 1, 2))
    older = SkippedSlots(h(1), h(1), 1, "overlap", h(1))
    answer = ex.explain(record, h(1), h(3), older_skip=older)
    assert answer.verdict == ex.SKIPPED and "skipped (overlap)" in answer.detail
