"""``airflow.sensors.base``: BaseSensorOperator (raftsched.airflow._sensors)."""

from __future__ import annotations

from raftsched.airflow._sensors import BaseSensorOperator, PokeReturnValue

__all__ = ["BaseSensorOperator", "PokeReturnValue"]
