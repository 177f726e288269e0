"""``airflow.providers.standard.operators.trigger_dagrun``: see ``operators.trigger_dagrun``."""

from __future__ import annotations

from raftsched.airflow.operators.trigger_dagrun import TriggerDagRunOperator

__all__ = ["TriggerDagRunOperator"]
