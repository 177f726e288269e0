"""Airflow's ``ExternalTaskSensor`` over deferral (docs/architecture.md §17): waits until
another DAG's run at the same logical date (or ``execution_delta`` before it, or the date
``execution_date_fn`` gives) reached one of ``allowed_states``: the run itself, or each of
``external_task_id``/``external_task_ids``.

The other run's state is the cluster's, and a task's process holds no token to read it: the
attempt always defers on an ``external`` trigger (whatever ``mode`` and ``deferrable`` say),
whose triggerer asks the cluster under the trigger's lease, so the wait holds no worker slot.
Reaching one of ``failed_states`` fails the task (the trigger raises: its message is in the
task's log); ``skipped_states`` skips it. ``timeout`` fails it (through the trigger's timeout:
``soft_fail`` does not turn that into a skip).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from raftsched.airflow._sensors import BaseSensorOperator, _after
from raftsched.airflow.exceptions import AirflowSkipException
from raftsched.dags.deferral import ExternalStateTrigger, TaskDeferred
from raftsched.errors import DagDefinitionError

_SKIPPED = "__skipped__"  # the trigger's outcome when a skipped state was reached


class ExternalTaskSensor(BaseSensorOperator):
    def __init__(
        self,
        *,
        external_dag_id: str,
        external_task_id: str | None = None,
        external_task_ids: Iterable[str] | None = None,
        allowed_states: Iterable[str] | None = None,
        skipped_states: Iterable[str] | None = None,
        failed_states: Iterable[str] | None = None,
        execution_delta: timedelta | None = None,
        execution_date_fn: Callable[..., datetime] | None = None,
        **kwargs: Any,
    ) -> None:
        task_id = kwargs.get("task_id")
        if external_task_id is not None and external_task_ids is not None:
            raise DagDefinitionError(
                f"ExternalTaskSensor {task_id!r}: give external_task_id or external_task_ids"
            )
        if execution_delta is not None and execution_date_fn is not None:
            raise DagDefinitionError(
                f"ExternalTaskSensor {task_id!r}: give execution_delta or execution_date_fn"
            )
        self.external_dag_id = str(external_dag_id)
        ids = [external_task_id] if external_task_id is not None else external_task_ids or []
        self.external_task_ids = [str(t) for t in ids]
        self.allowed = _states(allowed_states, ["success"])
        self.skipped = _states(skipped_states, [])
        self.failed = _states(failed_states, [])
        self.delta = execution_delta.total_seconds() if execution_delta is not None else 0.0
        self.execution_date_fn = execution_date_fn
        super().__init__(**kwargs)

    def poke_args(self) -> dict[str, Any]:
        return {
            "dag_id": self.external_dag_id,
            "task_ids": self.external_task_ids,
            "allowed": self.allowed,
            "failed": self.failed,
            "skipped": self.skipped,
            "delta": self.delta,
        }

    def target_date(self, args: dict[str, Any]) -> datetime:
        """The other run's logical date, from this run's (in the task's environment)."""
        own = datetime.fromisoformat(os.environ["RAFTSCHED_LOGICAL_DATE"])
        if self.execution_date_fn is None:
            return own - timedelta(seconds=float(args["delta"]))
        fn = self.execution_date_fn
        wanted = len(inspect.signature(fn).parameters)
        if wanted >= 2:
            from raftsched.airflow._context import get_current_context

            try:
                context: dict[str, Any] = get_current_context()
            except Exception:
                context = {}
            found = fn(own, context)
        else:
            found = fn(own)
        if isinstance(found, list | tuple):
            if len(found) != 1:
                raise ValueError("execution_date_fn must give one date in raftsched")
            found = found[0]
        if not isinstance(found, datetime) or found.tzinfo is None:
            raise ValueError(f"execution_date_fn gave {found!r}, not an aware datetime")
        return found

    def _run(self, sensor: dict[str, Any], event: Any = None, deadline: str = "") -> Any:
        if isinstance(event, dict):
            if event.get("outcome") == _SKIPPED:
                raise AirflowSkipException(f"{self.external_dag_id} reached {event['state']}")
            return event
        args = sensor["args"]
        due = _after(sensor["timeout"])
        left = max(1.0, (due - datetime.now(UTC)).total_seconds())
        trigger = ExternalStateTrigger(
            args["dag_id"],
            self.target_date(args),
            tuple(args["task_ids"]),
            allowed_states=tuple(args["allowed"]),
            failed_states=tuple(args["failed"]),
            skipped_states=tuple(args["skipped"]),
            poke_interval=float(sensor["poke_interval"]),
        )
        raise TaskDeferred(trigger, self.callable_name, {"sensor": sensor}, left)


def _states(given: Iterable[Any] | None, default: list[str]) -> list[str]:
    if given is None:
        return list(default)
    if isinstance(given, str):
        given = [given]
    return [str(getattr(s, "value", s)).lower() for s in given]


__all__ = ["ExternalTaskSensor"]
