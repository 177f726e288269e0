"""``airflow.providers.http.sensors.http``: HttpSensor (raftsched.airflow._http_sensor)."""

from __future__ import annotations

from raftsched.airflow._http_sensor import HttpSensor

__all__ = ["HttpSensor"]
