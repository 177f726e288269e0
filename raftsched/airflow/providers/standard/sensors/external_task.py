"""``airflow.providers.standard.sensors.external_task``: ExternalTaskSensor, waiting on the
triggerer (raftsched.airflow._external_sensor); ExternalTaskMarker is not offered."""

from __future__ import annotations

from raftsched.airflow._external_sensor import ExternalTaskSensor
from raftsched.airflow._unsupported import missing_names

__all__ = ["ExternalTaskSensor"]

__getattr__ = missing_names(
    "airflow.providers.standard.sensors.external_task",
    {
        "ExternalTaskMarker": "clearing across DAGs is not offered: clear the other DAG's"
        " tasks with `raftsched tasks clear`",
    },
)
