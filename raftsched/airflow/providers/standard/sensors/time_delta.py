"""``airflow.providers.standard.sensors.time_delta``: TimeDeltaSensor, TimeDeltaSensorAsync
(raftsched.airflow._sensors)."""

from __future__ import annotations

from raftsched.airflow._sensors import TimeDeltaSensor, TimeDeltaSensorAsync
from raftsched.airflow._unsupported import missing_names

__all__ = ["TimeDeltaSensor", "TimeDeltaSensorAsync"]

__getattr__ = missing_names(
    "airflow.providers.standard.sensors.time_delta",
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
