"""``airflow.operators.empty``: ``EmptyOperator`` (finished by the scheduler, no worker)."""

from __future__ import annotations

from raftsched.airflow._operators import EmptyOperator

__all__ = ["EmptyOperator"]
