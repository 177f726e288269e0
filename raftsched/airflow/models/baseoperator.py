"""``airflow.models.baseoperator``: ``chain``, ``cross_downstream``; a ``BaseOperator``
subclass cannot run yet.

A custom operator runs its ``execute(context)`` on Airflow's worker; raftsched has no such
task kind yet, so ``BaseOperator`` is the common base of this layer's operators only, for
``isinstance`` checks. Write the operator's work as a ``@task`` function instead.
"""

from __future__ import annotations

from typing import Any

from raftsched.airflow._unsupported import refuse
from raftsched.dags.decorators import chain
from raftsched.dags.tasks import Task


def cross_downstream(from_tasks: Any, to_tasks: Any) -> None:
    """Every task of ``from_tasks`` upstream of every task of ``to_tasks`` (Airflow's)."""
    for task in from_tasks:
        task >> list(to_tasks)


class _BaseOperatorMeta(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, Task)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        refuse(
            "a custom operator (a BaseOperator subclass)",
            "write its execute() as a @task function, or use BashOperator/PythonOperator",
        )


class BaseOperator(metaclass=_BaseOperatorMeta):
    """``isinstance(op, BaseOperator)`` holds for every task; instantiating is refused."""


__all__ = ["BaseOperator", "chain", "cross_downstream"]
