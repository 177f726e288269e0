"""``airflow.models.variable``: ``Variable`` (the variables a task declared)."""

from __future__ import annotations

from raftsched.airflow._variables import Variable

__all__ = ["Variable"]
