"""``airflow.utils.task_group``: ``TaskGroup`` (ids ``group.task``; ``group >> task``)."""

from __future__ import annotations

from raftsched.dags.task_groups import TaskGroup

__all__ = ["TaskGroup"]
