"""``airflow.providers.standard.sensors.external_task``: not supported yet (see the package)."""

from __future__ import annotations

from raftsched.airflow._unsupported import missing_names

__getattr__ = missing_names(
    "airflow.providers.standard.sensors.external_task",
    {
        name: "sensors are not supported yet: check once in a @task that raises when not"
        " ready, with retries= and retry_delay= to poll"
        for name in (
            "BashSensor",
            "PythonSensor",
            "TimeSensor",
            "TimeSensorAsync",
            "TimeDeltaSensor",
            "TimeDeltaSensorAsync",
            "DateTimeSensor",
            "DateTimeSensorAsync",
            "FileSensor",
            "ExternalTaskSensor",
            "ExternalTaskMarker",
        )
    },
)
