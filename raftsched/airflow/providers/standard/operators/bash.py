"""``airflow.providers.standard.operators.bash``: as :mod:`raftsched.airflow.operators.bash`."""

from __future__ import annotations

from raftsched.airflow.operators.bash import *  # noqa: F403
