"""``airflow.sdk`` (Airflow 3): ``DAG``, ``dag``, ``task``, ``task_group``, ``TaskGroup``,
``Param``, ``Label``, ``BaseOperator``, ``chain``, ``cross_downstream``, ``Context``,
``get_current_context``, ``TriggerRule``, ``Variable``, ``Asset``, ``AssetAll``, ``AssetAny``,
``Metadata``, ``AssetWatcher``."""

from __future__ import annotations

from raftsched.airflow._context import get_current_context
from raftsched.airflow._dag import DAG, dag
from raftsched.airflow._param import Param
from raftsched.airflow._taskflow import task, task_group
from raftsched.airflow._unsupported import missing_names
from raftsched.airflow._variables import Variable
from raftsched.airflow.models.baseoperator import BaseOperator, chain, cross_downstream
from raftsched.airflow.utils.context import Context
from raftsched.airflow.utils.edgemodifier import Label
from raftsched.airflow.utils.trigger_rule import TriggerRule
from raftsched.dags.assets import Asset, AssetAll, AssetAny, AssetWatcher, Metadata
from raftsched.dags.task_groups import TaskGroup

__getattr__ = missing_names(
    "airflow.sdk",
    {
        "Connection": "declare it with connections=['ID'] and read RAFTSCHED_CONN_ID",
        "BaseSensorOperator": "poll in a @task with retries and retry_delay",
        "setup": "setup/teardown tasks are not supported yet",
        "teardown": "setup/teardown tasks are not supported yet",
    },
)

__all__ = [
    "DAG",
    "Asset",
    "AssetAll",
    "AssetAny",
    "AssetWatcher",
    "BaseOperator",
    "Context",
    "Label",
    "Metadata",
    "Param",
    "TaskGroup",
    "TriggerRule",
    "Variable",
    "chain",
    "cross_downstream",
    "dag",
    "get_current_context",
    "task",
    "task_group",
]
