"""``airflow.assets`` (Airflow 3.0 betas): ``Asset``, ``AssetAll``, ``AssetAny`` are
raftsched's assets (:mod:`raftsched.dags.assets`, docs/architecture.md §21)."""

from __future__ import annotations

from raftsched.dags.assets import Asset, AssetAll, AssetAny

__all__ = ["Asset", "AssetAll", "AssetAny"]
