"""``TriggerDagRunOperator``: a task whose success creates a run of another DAG, exactly once
(core/dagrun_trigger.py, docs/architecture.md §20).

The task runs on a worker as a Python task so its templated fields (``trigger_dag_id``,
``trigger_run_id``, ``logical_date``, ``conf``) render there, as in Airflow; it returns the
request, and the apply of its successful outcome creates the run (or fails the attempt with
the reason: unknown DAG, run id or logical date taken; with ``skip_when_already_exists`` a
taken one ends it skipped). ``wait_for_completion`` and
``reset_dag_run`` are refused (no trigger watches another DAG's run yet; a run is not reset
behind its owner's back), each with what to do instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from raftsched.airflow._operators import current_dag, declare_template_variables, task_options
from raftsched.airflow._unsupported import refuse
from raftsched.dags import task_groups, taskflow
from raftsched.dags.taskflow import TaskFlowTask
from raftsched.errors import DagDefinitionError

WAIT_HINT = (
    "nothing here watches another DAG's run yet: put the work that must follow at the end of"
    " the triggered DAG (it may trigger a further DAG itself)"
)
RESET_HINT = (
    "leave trigger_run_id unset (each trigger makes a new run), or clear the existing run with"
    " `raftsched tasks clear`"
)


class TriggerDagRunOperator(TaskFlowTask):
    """``TriggerDagRunOperator(task_id=, trigger_dag_id=, trigger_run_id=, conf=,
    logical_date=, fail_when_dag_is_paused=, skip_when_already_exists=)``."""

    template_fields = ("trigger_dag_id", "trigger_run_id", "logical_date", "conf")

    def __init__(
        self,
        *,
        task_id: str,
        trigger_dag_id: str,
        trigger_run_id: str | None = None,
        conf: dict[str, Any] | None = None,
        logical_date: str | datetime | None = None,
        execution_date: str | datetime | None = None,  # Airflow 2's name of logical_date
        reset_dag_run: bool = False,
        wait_for_completion: bool = False,
        poke_interval: float = 60,
        allowed_states: Any = None,
        failed_states: Any = None,
        skip_when_already_exists: bool = False,
        fail_when_dag_is_paused: bool = False,
        deferrable: bool = False,
        dag: Any = None,
        **kwargs: Any,
    ) -> None:
        del poke_interval, allowed_states, failed_states, deferrable  # wait_for_completion's
        owner = current_dag(dag)
        full_id = task_groups.qualify(task_id)
        ids = {"dag_id": owner.dag_id, "task_id": full_id}
        if wait_for_completion:
            refuse("TriggerDagRunOperator(wait_for_completion=True)", WAIT_HINT, **ids)
        if reset_dag_run:
            refuse("TriggerDagRunOperator(reset_dag_run=True)", RESET_HINT, **ids)
        if not isinstance(trigger_dag_id, str) or not trigger_dag_id.strip():
            raise DagDefinitionError(
                f"task {full_id!r}: trigger_dag_id must be a DAG id, got {trigger_dag_id!r}",
                **ids,
            )
        when = logical_date if logical_date is not None else execution_date
        request = {
            "trigger_dag_id": trigger_dag_id,
            "trigger_run_id": trigger_run_id or "",
            "logical_date": when.isoformat() if isinstance(when, datetime) else (when or ""),
            "conf": conf or {},
            "fail_when_dag_is_paused": bool(fail_when_dag_is_paused),
            "skip_when_already_exists": bool(skip_when_already_exists),
        }
        options = declare_template_variables(task_options(owner, full_id, kwargs), request)
        super().__init__(task_id, dag=owner, kwargs={"request": request}, **options)
        self.trigger_dag_id = trigger_dag_id
        self.trigger_run_id = trigger_run_id
        self.conf = conf
        self.logical_date = when
        # the worker calls _run through the registry (callable_name @taskflow:DAG:TASK)
        taskflow.register(owner.dag_id, self.task_id, self._run)  # type: ignore[arg-type]

    def _spec_fields(self) -> dict[str, Any]:
        return {**super()._spec_fields(), "trigger_dagrun": True}

    def _run(self, request: dict[str, Any]) -> dict[str, Any]:
        """On the worker, templates rendered: the request the outcome's apply carries out."""
        dag_id = request.get("trigger_dag_id")
        if not isinstance(dag_id, str) or not dag_id.strip():
            raise ValueError(f"trigger_dag_id rendered to {dag_id!r}, not a DAG id")
        if not isinstance(request.get("conf"), dict):
            raise TypeError(f"conf must be a dict, got {type(request.get('conf')).__name__}")
        print(f"raftsched: triggering DAG {dag_id!r} (the run is created with this outcome)")
        return {**request, "trigger_dag_id": dag_id.strip()}


__all__ = ["TriggerDagRunOperator"]
