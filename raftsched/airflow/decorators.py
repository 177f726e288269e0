"""``airflow.decorators``: ``dag``, ``task`` (``.bash``, ``.branch``, ``.short_circuit``),
``task_group``."""

from __future__ import annotations

from raftsched.airflow._dag import dag
from raftsched.airflow._taskflow import task, task_group

__all__ = ["dag", "task", "task_group"]
