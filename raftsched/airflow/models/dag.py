"""``airflow.models.dag``: ``DAG``."""

from __future__ import annotations

from raftsched.airflow._dag import DAG

__all__ = ["DAG"]
