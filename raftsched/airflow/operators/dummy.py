"""``airflow.operators.dummy``: ``DummyOperator``, Airflow 2's old name of ``EmptyOperator``."""

from __future__ import annotations

from raftsched.airflow._operators import DummyOperator, EmptyOperator

__all__ = ["DummyOperator", "EmptyOperator"]
