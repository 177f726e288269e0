"""``airflow.providers.standard.operators.python``: as :mod:`raftsched.airflow.operators.python`."""

from __future__ import annotations

from raftsched.airflow.operators.python import *  # noqa: F403
from raftsched.airflow.operators.python import __getattr__ as __getattr__
