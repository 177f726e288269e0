"""``airflow.datasets.metadata`` (Airflow 2.10): ``Metadata``, what a task generator yields to
give its outlet's event an extra (:mod:`raftsched.dags.assets`)."""

from __future__ import annotations

from raftsched.dags.assets import Metadata

__all__ = ["Metadata"]
