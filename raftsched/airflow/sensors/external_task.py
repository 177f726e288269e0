"""``airflow.sensors.external_task`` (Airflow 2's home): ExternalTaskSensor
(raftsched.airflow._external_sensor)."""

from __future__ import annotations

from raftsched.airflow.providers.standard.sensors.external_task import ExternalTaskSensor
from raftsched.airflow.providers.standard.sensors.external_task import (
    __getattr__ as __getattr__,
)

__all__ = ["ExternalTaskSensor"]
