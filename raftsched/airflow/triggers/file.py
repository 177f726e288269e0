"""``airflow.triggers.file`` (Airflow 2): ``FileTrigger``, as in
:mod:`raftsched.airflow.providers.standard.triggers.file`."""

from __future__ import annotations

from raftsched.airflow.providers.standard.triggers.file import FileTrigger

__all__ = ["FileTrigger"]
