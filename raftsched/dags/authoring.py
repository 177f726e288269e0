"""The authoring API of DAG files: ``DAG``, its tasks (``BashTask``, ``PythonTask``,
``EmptyTask``) and ``>>``/``<<``.

    from datetime import datetime
    from raftsched import DAG, BashTask

    with DAG("etl", schedule="*/5 * * * *", start_date=datetime(2024, 1, 1)):
        extract = BashTask("extract", command="echo extract")
        load = BashTask("load", command="echo load")
        extract >> load

Mistakes raise ``DagDefinitionError`` as early as they can be seen: a bad id, cron, zone or
option when the object is built; cycles when ``to_spec()`` sees the whole graph. A naive
start_date or end_date is wall-clock time in the DAG's time zone. Every value is bounded as
``raftsched.core.limits`` says (sizes, counts, ranges, dates); ``to_spec()`` checks the whole
spec once more (``validation.check_spec``), so a spec the cluster would refuse never leaves the
parser.

The DAG object lives in :mod:`raftsched.dags.dag`, the tasks in :mod:`raftsched.dags.tasks`;
this module re-exports them.
"""

from __future__ import annotations

from raftsched.dags import validation as v  # noqa: F401  (re-exported: reached as authoring.v)
from raftsched.dags.assets import Asset, AssetAll, AssetAny, AssetWatcher, Dataset
from raftsched.dags.callbacks import DeadlineAlert, DeadlineReference
from raftsched.dags.dag import DAG, collect_dags, set_catchup_default
from raftsched.dags.decorators import chain, dag, task
from raftsched.dags.empty import EmptyTask
from raftsched.dags.params import Param
from raftsched.dags.task_groups import TaskGroup
from raftsched.dags.taskflow import XComArg
from raftsched.dags.tasks import BashTask, PythonTask, Task, declare_secrets
from raftsched.errors import TaskSkipped

__all__ = [
    "DAG",
    "Asset",
    "AssetAll",
    "AssetAny",
    "AssetWatcher",
    "BashTask",
    "Dataset",
    "DeadlineAlert",
    "DeadlineReference",
    "EmptyTask",
    "Param",
    "PythonTask",
    "Task",
    "TaskGroup",
    "TaskSkipped",
    "XComArg",
    "chain",
    "collect_dags",
    "dag",
    "declare_secrets",
    "set_catchup_default",
    "task",
]
