"""``dagrun_timeout``: a run still unfinished that long after it started is failed, by a
committed decision (docs/architecture.md §20).

The leader walks the runs of DAGs whose spec sets ``dagrun_timeout_seconds`` (at most once a
second, ``cluster/leader_walks.py``) and proposes :class:`TimeoutRuns`; apply re-checks each
run against the command's ``now`` and, as Airflow's scheduler does, makes every unfinished task
instance SKIPPED (a running attempt's lease is revoked and fenced, so its worker's next
heartbeat is refused and the worker kills it: invariant 2) and the run FAILED, in that one
apply. Each skipped instance's message and the run's failure callbacks say why
(:data:`TIMED_OUT`). A run's clock starts when it is created (Airflow's when the run is
scheduled, which is when raftsched creates it). The command is new in release 3: the upgrade
gate refuses it below cluster version 3, and no spec with ``dagrun_timeout_seconds`` exists
there either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from raftsched.core import limits as lim
from raftsched.core import results as r
from raftsched.core.changes import touch_ti
from raftsched.core.commands import Command
from raftsched.core.model import FINISHED_RUN_STATES, FINISHED_TASK_STATES, TaskState
from raftsched.core.results import Item, Result
from raftsched.core.transitions import set_state, settle_run
from raftsched.errors import LimitExceeded

if TYPE_CHECKING:
    from raftsched.core.run_table import LiveRun
    from raftsched.core.state import SchedulerState

TIMED_OUT = "timed_out: the run passed its dagrun_timeout"
NO_TIMEOUT = "no_timeout"
MAX_PER_TICK = 500  # runs per TimeoutRuns (a tick proposes the rest next time)


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutRuns(Command):
    """Runs (dag_id, run_id) the leader saw past their DAG's dagrun_timeout: apply re-checks
    each against ``now`` and fails it (unfinished task instances SKIPPED)."""

    runs: tuple[tuple[str, str], ...] = ()


def deadline(rec: LiveRun) -> datetime | None:
    """When the run times out (None: its spec sets no dagrun_timeout)."""
    seconds = getattr(rec.spec, "dagrun_timeout_seconds", None)
    started = rec.run.created_at or rec.run.start_date
    if seconds is None or started is None:
        return None
    return started + timedelta(seconds=seconds)


def timed_out_runs(state: SchedulerState, now: datetime) -> list[tuple[str, str]]:
    """Unfinished runs past their dagrun_timeout: what the leader proposes (runs of the
    DAGs whose current spec sets one; sorted, the same order on every node)."""
    out: list[tuple[str, str]] = []
    dags = sorted(state.catalog.with_timeout)
    for rec in (rec for dag_id in dags for rec in state.run_table.records(dag_id)):
        if rec.run.state in FINISHED_RUN_STATES:
            continue
        due = deadline(rec)
        if due is not None and due <= now:
            out.append(rec.key)
            if len(out) >= MAX_PER_TICK:
                break
    return out


def apply_timeout_runs(
    state: SchedulerState, cmd: TimeoutRuns, now: datetime, index: int
) -> Result:
    items = []
    for dag_id, run_id in cmd.runs:
        rec = state.run_table.get(dag_id, run_id)
        due = None if rec is None else deadline(rec)
        if rec is None:
            items.append(Item(False, r.UNKNOWN_RUN))
        elif rec.run.state in FINISHED_RUN_STATES:
            items.append(Item(False, r.STATE_CHANGED))
        elif due is None:
            items.append(Item(False, NO_TIMEOUT))
        elif now < due:
            items.append(Item(False, r.NOT_DUE))
        else:
            _time_out(state, rec, now)
            items.append(Item(True))
    return Result.of_items(items)


def _time_out(state: SchedulerState, rec: LiveRun, now: datetime) -> None:
    seconds = getattr(rec.spec, "dagrun_timeout_seconds", 0) or 0
    message = f"{TIMED_OUT} of {seconds:g}s"
    for ti in rec.tis.values():
        if ti.state in FINISHED_TASK_STATES:
            continue
        touch_ti(state, ti)
        if ti.state is TaskState.RUNNING:
            state.task_queue.fence(ti)  # not leased again until the revoked lease has ended
        ti.end_date, ti.next_retry_at, ti.message = now, None, message
        set_state(state, rec, ti, TaskState.SKIPPED)  # revokes a live lease
    settle_run(state, rec, now, failed=True)


def _check(cmd: TimeoutRuns) -> None:
    if not isinstance(cmd.runs, tuple):
        raise LimitExceeded("runs", "must be a tuple")
    lim.check_count("runs", len(cmd.runs), lim.MAX_ITEMS_PER_COMMAND)
    for i, ref in enumerate(cmd.runs):
        if not (isinstance(ref, tuple) and len(ref) == 2):
            raise LimitExceeded(f"runs[{i}]", "must be a (dag_id, run_id) pair")
        lim.check_id(f"runs[{i}].dag_id", ref[0])
        lim.check_id(f"runs[{i}].run_id", ref[1])


CHECKS: dict[type, Callable[[Any], None]] = {TimeoutRuns: _check}
HANDLERS: dict[type, Callable[[Any, Any, datetime, int], Result]] = {
    TimeoutRuns: apply_timeout_runs
}
