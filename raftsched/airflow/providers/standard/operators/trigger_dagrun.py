"""``airflow.providers.standard.operators.trigger_dagrun``: see ``operators.trigger_dagrun``."""

from __future__ import annotations

from raftsched.airflow.operators.trigger_dagrun import *  # noqa: F403
from raftsched.airflow.operators.trigger_dagrun import __getattr__ as __getattr__
