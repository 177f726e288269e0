"""The TaskFlow decorators: ``@task`` (``@task.python``, ``@task.bash``, ``@task.branch``),
``@dag`` and ``chain``. What they build is in :mod:`raftsched.dags.taskflow`."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from raftsched.dags.dag import DAG
from raftsched.dags.taskflow import AIRFLOW_BASH_SKIP_CODE, TaskFactory, XComArg, unwrap
from raftsched.dags.tasks import Task
from raftsched.errors import DagDefinitionError


def _decorator(
    *, branch: bool = False, bash: bool = False
) -> Callable[..., TaskFactory | Callable[[Callable[..., Any]], TaskFactory]]:
    def decorate(
        python_callable: Callable[..., Any] | None = None,
        *,
        skip_on_exit_code: int | None = AIRFLOW_BASH_SKIP_CODE if bash else None,
        **options: Any,
    ) -> Any:
        def wrap(function: Callable[..., Any]) -> TaskFactory:
            return TaskFactory(
                function,
                branch=branch,
                bash=bash,
                skip_on_exit_code=skip_on_exit_code,
                options=options,
            )

        return wrap(python_callable) if python_callable is not None else wrap

    return decorate


class _TaskDecorators:
    """``@task``, ``@task(retries=2)``, ``@task.python``, ``@task.bash``, ``@task.branch``."""

    def __init__(self) -> None:
        self.python = _decorator()
        self.bash = _decorator(bash=True)
        self.branch = _decorator(branch=True)

    def __call__(self, python_callable: Callable[..., Any] | None = None, **options: Any) -> Any:
        return self.python(python_callable, **options)


task = _TaskDecorators()


class DagFactory:
    """A ``@dag`` function: calling it builds the DAG (its id: the function's name, or
    ``dag_id=``) with the function's body inside ``with DAG(...)``, and returns the DAG."""

    def __init__(self, function: Callable[..., Any], options: dict[str, Any]) -> None:
        self.function = function
        self.options = options
        functools.update_wrapper(self, function)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> DAG:
        options = dict(self.options)
        dag_id = options.pop("dag_id", None) or self.function.__name__
        if "schedule" not in options:
            raise DagDefinitionError(
                f"@dag {dag_id!r} needs a schedule (a cron string, a timedelta, '@daily',"
                " or None for manual runs only)",
                dag_id=str(dag_id),
            )
        built = DAG(dag_id, **options)
        built.fileloc = self.function.__code__.co_filename  # not this module's
        with built:
            self.function(*args, **kwargs)
        return built


def dag(
    function: Callable[..., Any] | None = None,
    *,
    dag_id: str | None = None,
    schedule: str | timedelta | None = ...,  # type: ignore[assignment]
    **options: Any,
) -> Any:
    """``@dag(schedule=..., start_date=..., ...)``: DAG options as ``DAG(...)`` takes them."""
    if schedule is not ...:
        options["schedule"] = schedule
    if dag_id is not None:
        options["dag_id"] = dag_id

    def wrap(fn: Callable[..., Any]) -> DagFactory:
        return DagFactory(fn, options)

    return wrap(function) if function is not None else wrap


def chain(*steps: XComArg | Task | Iterable[XComArg | Task]) -> None:
    """``chain(a, b, c)`` is ``a >> b >> c`` (lists fan out/in)."""
    for first, second in itertools.pairwise(steps):
        unwrap_first = unwrap(first)
        unwrap_second = unwrap(second)
        firsts = unwrap_first if isinstance(unwrap_first, list) else [unwrap_first]
        for item in firsts:
            item.set_downstream(unwrap_second)


__all__ = ["DagFactory", "chain", "dag", "task"]
