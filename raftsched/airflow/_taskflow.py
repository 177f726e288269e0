"""Airflow's ``@task`` family and ``@task_group`` over raftsched's TaskFlow.

``@task`` (``@task.python``), ``@task.bash``, ``@task.branch`` and ``@task.short_circuit``
build the same tasks as :mod:`raftsched.dags.decorators` (arguments wired as XCom, ids
deduplicated, ``.override()``), and take every Airflow task argument, the DAG's
``default_args`` included (``_operators.task_options``). The function is called through
:class:`raftsched.airflow._callables.AirflowCallable`, so it may declare context keys
(``ti``, ``params``, ``logical_date``, ``**context``...). ``multiple_outputs=True`` checks
the value is a dict; its keys are passed on as ``output["key"]``, as in Airflow.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from raftsched.airflow import _callables, _sensors
from raftsched.airflow._operators import declare_template_variables, task_options
from raftsched.airflow._unsupported import refuse
from raftsched.dags import task_groups
from raftsched.dags.dag import _context
from raftsched.dags.task_groups import TaskGroup
from raftsched.dags.taskflow import AIRFLOW_BASH_SKIP_CODE, TaskFactory, XComArg


class AirflowTaskFactory(TaskFactory):
    """A ``@task`` function of an Airflow DAG file."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        mode: str = _callables.PYTHON,
        options: dict[str, Any] | None = None,
    ) -> None:
        options = dict(options or {})
        self.mode = mode
        self.multiple_outputs = bool(options.pop("multiple_outputs", False))
        where = f"@task.sensor {getattr(function, '__name__', '?')}"
        self.sensor = _sensors.sensor_config(options, where) if mode == _callables.SENSOR else None
        skip = options.pop("skip_on_exit_code", AIRFLOW_BASH_SKIP_CODE)
        self.airflow_options = options
        super().__init__(function, bash=mode == _callables.BASH, skip_on_exit_code=skip)

    def override(self, **options: Any) -> AirflowTaskFactory:
        merged = {
            **self.airflow_options,
            "multiple_outputs": self.multiple_outputs,
            "skip_on_exit_code": self.skip_on_exit_code,
            **(self.sensor or {}),
            **options,
        }
        return AirflowTaskFactory(self.function, mode=self.mode, options=merged)

    def __call__(self, *args: Any, **kwargs: Any) -> XComArg:
        dag = _context[-1] if _context else None
        if dag is not None:  # else TaskFactory says the call is outside a DAG
            options = dict(self.airflow_options)
            task_id = options.pop("task_id", None)
            bound = options.pop("max_map_length", None)  # raftsched's, for .expand()
            name = task_groups.qualify(str(task_id or self.function.__name__))
            self.options = task_options(dag, name, options)
            if task_id is not None:
                self.options["task_id"] = task_id
            if bound is not None:
                self.options["max_map_length"] = bound
            declare_template_variables(self.options, args, kwargs)
        output = super().__call__(*args, **kwargs)
        _callables.register(
            output.operator,
            self.function,
            mode=self.mode,
            multiple_outputs=self.multiple_outputs,
            skip_on_exit_code=self.skip_on_exit_code,
            sensor=self.sensor,
        )
        return output


def _decorator(mode: str) -> Callable[..., Any]:
    def decorate(python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
        def wrap(function: Callable[..., Any]) -> AirflowTaskFactory:
            return AirflowTaskFactory(function, mode=mode, options=options)

        return wrap(python_callable) if python_callable is not None else wrap

    return decorate


_OTHER_KINDS = {
    "virtualenv": "install the packages on the workers and use @task",
    "external_python": "install the packages on the workers and use @task",
    "docker": "run the container from @task.bash (docker run ...)",
    "kubernetes": "run the pod from @task.bash (kubectl ...)",
    "sql": "run the query from @task with your database driver",
    "pyspark": "submit the job from @task.bash",
    "run_if": "use @task.short_circuit upstream",
    "skip_if": "use @task.short_circuit upstream",
}


class _TaskDecorators:
    """``@task``, ``@task(...)``, ``@task.python``, ``.bash``, ``.branch``, ``.short_circuit``."""

    def __init__(self) -> None:
        self.python = _decorator(_callables.PYTHON)
        self.bash = _decorator(_callables.BASH)
        self.branch = _decorator(_callables.BRANCH)
        self.short_circuit = _decorator(_callables.SHORT_CIRCUIT)
        self.sensor = _decorator(_callables.SENSOR)  # poke_interval=, timeout=, mode=

    def __call__(self, python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
        return self.python(python_callable, **options)

    def __getattr__(self, name: str) -> Any:
        if name in _OTHER_KINDS:
            refuse(f"@task.{name}", _OTHER_KINDS[name])
        raise AttributeError(f"task has no attribute {name!r}")


task = _TaskDecorators()


def task_group(
    function: Callable[..., Any] | None = None, *, group_id: str | None = None, **options: Any
) -> Any:
    """``@task_group``: calling the function builds its tasks inside a ``TaskGroup`` named
    after it (or ``group_id``); the call returns what the function returns, or the group."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def build(*args: Any, **kwargs: Any) -> Any:
            with TaskGroup(group_id or fn.__name__, **options) as group:
                result = fn(*args, **kwargs)
            return group if result is None else result

        return build

    return wrap(function) if function is not None else wrap


__all__ = ["AirflowTaskFactory", "task", "task_group"]
