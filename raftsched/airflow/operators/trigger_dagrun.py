"""``airflow.operators.trigger_dagrun``: ``TriggerDagRunOperator`` (a committed decision,
exactly once: raftsched/airflow/_trigger_dagrun.py)."""

from __future__ import annotations

from raftsched.airflow._trigger_dagrun import TriggerDagRunOperator

__all__ = ["TriggerDagRunOperator"]
