"""``airflow.datasets`` (Airflow 2): ``Dataset``, ``DatasetAll``, ``DatasetAny`` are
raftsched's assets (:mod:`raftsched.dags.assets`, docs/architecture.md §21)."""

from __future__ import annotations

from raftsched.dags.assets import Dataset, DatasetAll, DatasetAny

__all__ = ["Dataset", "DatasetAll", "DatasetAny"]
