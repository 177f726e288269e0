"""``airflow.utils.dates``: ``days_ago`` is refused, on purpose.

``start_date=days_ago(2)`` is a different date each day the file is parsed, so the DAG's spec
(and its hash) would change every day; Airflow 3 removed it too.
"""

from __future__ import annotations

from raftsched.airflow._unsupported import missing_names

__getattr__ = missing_names(
    "airflow.utils.dates",
    {
        "days_ago": "use a fixed start_date, e.g. datetime(2024, 1, 1) or"
        " pendulum.datetime(2024, 1, 1, tz='UTC') (days_ago changes every day)",
    },
)
