"""``airflow.operators.bash``: ``BashOperator``."""

from __future__ import annotations

from raftsched.airflow._operators import BashOperator

__all__ = ["BashOperator"]
