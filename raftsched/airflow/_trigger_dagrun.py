"""``TriggerDagRunOperator``: a task whose success creates a run of another DAG, exactly once
(core/dagrun_trigger.py, docs/architecture.md §20).

The task runs on a worker as a Python task so its templated fields (``trigger_dag_id``,
``trigger_run_id``, ``logical_date``, ``conf``) render there, as in Airflow; it returns the
request, and the apply of its successful outcome creates the run (or fails the attempt with
the reason: unknown DAG, "DagRun already exists"; with ``skip_when_already_exists`` a taken
run id or date ends it skipped). ``reset_dag_run=True``: an existing run is cleared so it
runs again (core/dagrun_reset.py; it wins over ``skip_when_already_exists``, as in Airflow).
``wait_for_completion=True``: the same apply makes the task DEFERRED on an ``external``
trigger watching the run (whatever ``deferrable`` says: a task's process cannot read another
run's state, and the wait then holds no worker slot), polled every ``poke_interval``
seconds; the task succeeds once the run reaches one of ``allowed_states`` (default
``success``) and fails once it reaches one of ``failed_states`` (default ``failed``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from raftsched.airflow._operators import current_dag, declare_template_variables, task_options
from raftsched.core.dagrun_trigger import MAX_POKE_SECONDS, MIN_POKE_SECONDS, RUN_STATES
from raftsched.dags import task_groups, taskflow
from raftsched.dags.taskflow import TaskFlowTask
from raftsched.errors import DagDefinitionError


class TriggerDagRunOperator(TaskFlowTask):
    """``TriggerDagRunOperator(task_id=, trigger_dag_id=, trigger_run_id=, conf=,
    logical_date=, reset_dag_run=, wait_for_completion=, poke_interval=, allowed_states=,
    failed_states=, deferrable=, fail_when_dag_is_paused=, skip_when_already_exists=)``."""

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
        del deferrable  # the wait always defers (module docstring)
        owner = current_dag(dag)
        full_id = task_groups.qualify(task_id)
        ids = {"dag_id": owner.dag_id, "task_id": full_id}
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
        if reset_dag_run:
            request["reset_dag_run"] = True
        if wait_for_completion:
            where = f"TriggerDagRunOperator {full_id!r}"
            request["wait_for_completion"] = True
            request["poke_interval"] = _poke(poke_interval, where, ids)
            if allowed_states is not None:
                request["allowed_states"] = _states(allowed_states, "allowed_states", where, ids)
            if failed_states is not None:
                request["failed_states"] = _states(failed_states, "failed_states", where, ids)
        options = declare_template_variables(task_options(owner, full_id, kwargs), request)
        super().__init__(task_id, dag=owner, kwargs={"request": request}, **options)
        self.trigger_dag_id = trigger_dag_id
        self.trigger_run_id = trigger_run_id
        self.conf = conf
        self.logical_date = when
        self.reset_dag_run = bool(reset_dag_run)
        self.wait_for_completion = bool(wait_for_completion)
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


def _states(given: Any, name: str, where: str, ids: dict[str, str]) -> list[str]:
    """Run states (DagRunState members or their names) as the request carries them."""
    items = [given] if isinstance(given, str) else list(given)
    out = [str(getattr(s, "value", s)).lower() for s in items]
    wrong = [s for s in out if s not in RUN_STATES]
    if wrong:
        raise DagDefinitionError(
            f"{where}: {name} may name run states {', '.join(RUN_STATES)}; got {wrong[:4]}",
            **ids,
        )
    return sorted(set(out))


def _poke(given: Any, where: str, ids: dict[str, str]) -> float:
    seconds = given.total_seconds() if isinstance(given, timedelta) else given
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise DagDefinitionError(f"{where}: poke_interval must be seconds, got {given!r}", **ids)
    if not MIN_POKE_SECONDS <= float(seconds) <= MAX_POKE_SECONDS:
        raise DagDefinitionError(
            f"{where}: poke_interval must be {MIN_POKE_SECONDS:g}..{MAX_POKE_SECONDS:g}"
            f" seconds (the triggerer asks the cluster that often), got {seconds!r}",
            **ids,
        )
    return float(seconds)


__all__ = ["TriggerDagRunOperator"]
