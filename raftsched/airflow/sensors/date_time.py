"""``airflow.sensors.date_time``: DateTimeSensor, DateTimeSensorAsync
(raftsched.airflow._sensors)."""

from __future__ import annotations

from raftsched.airflow._sensors import DateTimeSensor, DateTimeSensorAsync
from raftsched.airflow._unsupported import missing_names

__all__ = ["DateTimeSensor", "DateTimeSensorAsync"]

__getattr__ = missing_names(
    "airflow.sensors.date_time",
    {
        name: "not supported yet: FileSensor, DateTimeSensor(Async) and TimeDeltaSensor(Async)"
        " are; otherwise check once in a @task that raises when not ready, with retries="
        " and retry_delay= to poll"
        for name in (
            "BashSensor",
            "PythonSensor",
            "TimeSensor",
            "TimeSensorAsync",
            "ExternalTaskSensor",
            "ExternalTaskMarker",
        )
    },
)
