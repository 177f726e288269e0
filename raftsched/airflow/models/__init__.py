"""``airflow.models``: ``DAG``, ``Param``, ``BaseOperator``, ``Variable`` (declared ones);
``Connection``, ``XCom`` and ``Pool`` (a task's ``pool=`` names one; the CLI, REST API and web
page manage them) are not here (the error says what to use)."""

from __future__ import annotations

from raftsched.airflow._dag import DAG
from raftsched.airflow._param import Param
from raftsched.airflow._unsupported import missing_names
from raftsched.airflow._variables import Variable
from raftsched.airflow.models.baseoperator import BaseOperator, chain

__getattr__ = missing_names(
    "airflow.models",
    {
        "Connection": "declare it with connections=['ID'] and read RAFTSCHED_CONN_ID",
        "XCom": "pass the output of a @task call as an argument",
        "Pool": "name a pool with pool= on the task; create it with `raftsched pools set`",
        "DagRun": "read the run from the context (dag_run)",
        "TaskInstance": "read the attempt from the context (ti)",
    },
)

__all__ = ["DAG", "BaseOperator", "Param", "Variable", "chain"]
