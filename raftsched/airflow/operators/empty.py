"""``airflow.operators.empty``: ``EmptyOperator`` (a bash task running ``:``)."""

from __future__ import annotations

from raftsched.airflow._operators import EmptyOperator

__all__ = ["EmptyOperator"]
