"""Runs that depend on earlier runs: Airflow's ``depends_on_past``, ``wait_for_downstream``
and ``ignore_first_depends_on_past`` (docs/architecture.md §20).

A task's ``TaskSpec.past_deps`` (an added field, so specs without it hash as before and the
upgrade gate refuses it below cluster version 3) is one of :data:`PAST_DEPS`:

- ``"past"``: an instance of the task in run N is ready only once the same task in the
  previous run (the held run of the DAG with the greatest logical date before N's) is SUCCESS
  or SKIPPED (Airflow's ``PrevDagrunDep``);
- ``"downstream"``: as ``"past"``, and the task's direct downstream tasks in that previous run
  are SUCCESS or SKIPPED too (``wait_for_downstream``, which implies ``depends_on_past``);
- a ``"_strict"`` suffix: ``ignore_first_depends_on_past=False`` (Airflow's default). Without
  it, a previous run that lacks the task (the task was added since) does not hold it back;
  with it, the task waits until that instance is marked (as Airflow's "previous ti missing").

No previous run held at all passes: it is the DAG's first run, or its previous run left
memory. A run of such a DAG is kept in memory (parked) while it is its DAG's newest run or the
run after it is unfinished (:func:`keeps`), so the previous run of a run the scheduler creates
is always held; a manual or backfilled run on an older date whose predecessor was evicted long
ago passes (the DB has it, the core cannot read the DB). Everything here reads committed state
only, so every replica decides alike; settling the next run when a task finishes is done by
``transitions.after_finish``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftsched.core.model import FINISHED_RUN_STATES, DagSpec, TaskState

if TYPE_CHECKING:
    from raftsched.core.run_table import LiveRun, RunTable

PAST = "past"
DOWNSTREAM = "downstream"
STRICT = "_strict"
PAST_DEPS = frozenset({"", PAST, DOWNSTREAM, PAST + STRICT, DOWNSTREAM + STRICT})
_OK = (TaskState.SUCCESS, TaskState.SKIPPED)


def rule(
    depends_on_past: bool, wait_for_downstream: bool = False, ignore_first: bool = False
) -> str:
    """The ``past_deps`` value of Airflow's three arguments (``wait_for_downstream``
    implies ``depends_on_past``, as in Airflow)."""
    if not (depends_on_past or wait_for_downstream):
        return ""
    return (DOWNSTREAM if wait_for_downstream else PAST) + ("" if ignore_first else STRICT)


_USES: dict[str, bool] = {}  # spec_hash -> uses past deps (derived, so no replica differs)


def uses_past(spec: DagSpec | None) -> bool:
    """Does any task of ``spec`` depend on the past? (Asked at every task's end:
    remembered per spec hash, so it costs a lookup, not a walk of the tasks.)"""
    if spec is None:
        return False
    key = spec.spec_hash
    found = _USES.get(key)
    if found is None:
        if len(_USES) >= 10_000:
            _USES.clear()
        found = _USES[key] = any(getattr(t, "past_deps", "") for t in spec.tasks)
    return found


def previous_run(table: RunTable, rec: LiveRun) -> LiveRun | None:
    """The held run of the same DAG with the greatest logical date before ``rec``'s."""
    best: LiveRun | None = None
    mine = rec.run.logical_date
    for other in table.records(rec.run.dag_id):
        date = other.run.logical_date
        if date < mine and (best is None or date > best.run.logical_date):
            best = other
    return best


def next_run(table: RunTable, rec: LiveRun) -> LiveRun | None:
    """The held run of the same DAG with the least logical date after ``rec``'s."""
    best: LiveRun | None = None
    mine = rec.run.logical_date
    for other in table.records(rec.run.dag_id):
        date = other.run.logical_date
        if date > mine and (best is None or date < best.run.logical_date):
            best = other
    return best


def met(table: RunTable, rec: LiveRun, task_id: str) -> bool:
    """May ``task_id`` of ``rec`` (whose trigger rule is met) be queued, as far as the
    previous run is concerned?"""
    how = getattr(rec.topo.tasks[task_id], "past_deps", "")
    if not how or how not in PAST_DEPS:
        return True
    before = previous_run(table, rec)
    if before is None:
        return True  # the first run, or its predecessor left memory (module docstring)
    previous = before.tis.get(task_id)
    if previous is None:  # the task did not exist then
        return not how.endswith(STRICT)
    if previous.state not in _OK:
        return False
    if how.startswith(DOWNSTREAM):
        for down in before.topo.downstream.get(task_id, ()):
            ti = before.tis.get(down)
            if ti is not None and ti.state not in _OK:
                return False
    return True


WAITING = "waiting for the previous run: "  # the message of an instance held back


def why_waiting(table: RunTable, rec: LiveRun, task_id: str) -> str:
    """The message of ``task_id`` of ``rec`` while :func:`met` holds it back."""
    before = previous_run(table, rec)
    how = getattr(rec.topo.tasks[task_id], "past_deps", "")
    which = f"{task_id!r} of run {before.run.run_id}" if before else repr(task_id)
    downstream = " and its direct downstream tasks" if how.startswith(DOWNSTREAM) else ""
    return f"{WAITING}{which}{downstream} must succeed or be skipped (depends_on_past)"[:500]


def waiting_on(rec: LiveRun, task_id: str) -> list[str]:
    """The tasks of the run after ``rec`` that a change of ``task_id`` in ``rec`` may free:
    the task itself (depends_on_past) and its direct upstream (wait_for_downstream)."""
    return [task_id, *rec.topo.upstream.get(task_id, ())]


def keeps(table: RunTable, rec: LiveRun, current: DagSpec | None) -> bool:
    """Must the finished run ``rec`` stay in memory for the past dependencies of the run
    after it (its spec or its DAG's ``current`` one uses them)? While it is its DAG's newest
    run (the next scheduled run will ask for it) or the run after it is unfinished. O(1) for
    DAGs that do not use them: every eviction asks."""
    if not (uses_past(rec.spec) or uses_past(current)):
        return False
    following = next_run(table, rec)
    return following is None or following.run.state not in FINISHED_RUN_STATES
