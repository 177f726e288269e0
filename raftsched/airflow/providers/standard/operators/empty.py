"""``airflow.providers.standard.operators.empty``: as :mod:`raftsched.airflow.operators.empty`."""

from __future__ import annotations

from raftsched.airflow.operators.empty import *  # noqa: F403
