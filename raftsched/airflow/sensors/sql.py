"""``airflow.sensors.sql`` (Airflow 2's home): SqlSensor (raftsched.airflow._sql_sensor)."""

from __future__ import annotations

from raftsched.airflow._sql_sensor import SqlSensor

__all__ = ["SqlSensor"]
