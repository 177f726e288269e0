"""``reset_dag_run=True`` of a TriggerDagRunOperator (core/dagrun_trigger.py): when the run
it asks for already exists, it is cleared so it runs again, as in Airflow (whose operator
clears the existing run instead of failing with "DagRun already exists").

Pure decisions over the run table, no change here: which held run a trigger request collides
with (:func:`existing_run`: the one with its run id, else the one at its logical date), why
it cannot be reset (:func:`refusal`: it left memory, or it is the trigger task's own run),
and what clearing it means (:func:`tasks_to_clear`: every task of the run, a mapped task
whole, so it expands again). ``dagrun_trigger`` carries the clear out with
``handlers_marks.clear`` in the same apply as the task's outcome, so a reset happens iff the
attempt succeeds, once: the outcome is fenced by its lease and remembered by its request id.

As in Airflow, the run keeps its own conf and run type (a clear does not change them): the
request's conf is not applied to a run that is reset.
"""

from __future__ import annotations

from datetime import datetime

from raftsched.core import mapping
from raftsched.core.model import TaskKey
from raftsched.core.run_table import LiveRun, RunTable

GONE = (
    "DagRun already exists: DAG {dag!r} had a run with that run id or logical date, which"
    " finished and left the scheduler's memory ([scheduler] run_retention_sec), so"
    " reset_dag_run cannot clear it here; clear it with `raftsched tasks clear`, or give"
    " another trigger_run_id/logical_date"
)
OWN = (
    "reset_dag_run would clear the run this task runs in ({run_id} of DAG {dag!r}); give"
    " another trigger_run_id/logical_date"
)


def existing_run(
    runs: RunTable, dag_id: str, run_id: str, logical: datetime | None
) -> LiveRun | None:
    """The held run of ``dag_id`` a trigger request collides with: the one with ``run_id``
    (when given), else the one at ``logical`` (when given); None if neither is held."""
    if run_id:
        rec = runs.get(dag_id, run_id)
        if rec is not None:
            return rec
    if logical is not None:
        return runs.run_at(dag_id, logical)
    return None


def refusal(rec: LiveRun | None, dag_id: str, by: TaskKey) -> str:
    """Why the collided run cannot be reset by the task ``by``, or "" when it can."""
    if rec is None:
        return GONE.format(dag=dag_id)
    if rec.run.dag_id == by.dag_id and rec.run.run_id == by.run_id:
        return OWN.format(dag=dag_id, run_id=rec.run.run_id)
    return ""


def tasks_to_clear(rec: LiveRun) -> list[str]:
    """Every task of the run, sorted; a mapped task's instances go with their task (it
    expands again when it is ready), so no instance id is named alone."""
    return sorted(t for t in rec.tis if not mapping.is_instance(t))
