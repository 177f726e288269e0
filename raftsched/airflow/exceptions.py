"""``airflow.exceptions``: raising ``AirflowSkipException`` in a task ends it SKIPPED;
``AirflowFailException`` and ``AirflowException`` fail it (retries still apply to both here:
raftsched has no fail-without-retry yet)."""

from __future__ import annotations

from raftsched.airflow._param import ParamValidationError
from raftsched.airflow._unsupported import NotSupportedError
from raftsched.errors import TaskSkipped


class AirflowException(Exception):
    """Airflow's base exception."""


class AirflowFailException(AirflowException):
    """Fails the task (Airflow: without retrying; here its retries still apply)."""


class AirflowSkipException(TaskSkipped, AirflowException):
    """Ends the task SKIPPED."""


class AirflowNotFoundException(AirflowException):
    pass


class AirflowSensorTimeout(AirflowException):
    """A sensor's timeout passed before what it waits for was there: the task fails."""


__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "NotSupportedError",
    "ParamValidationError",
]
