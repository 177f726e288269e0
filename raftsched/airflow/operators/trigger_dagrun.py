"""``airflow.operators.trigger_dagrun``: ``TriggerDagRunOperator`` is not supported yet."""

from __future__ import annotations

from raftsched.airflow._unsupported import missing_names

__getattr__ = missing_names(
    "airflow.operators.trigger_dagrun",
    {
        "TriggerDagRunOperator": "not supported yet: run `raftsched dags trigger ID` from a"
        " BashOperator (with a token of the operator role)"
    },
)
