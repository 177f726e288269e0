"""Airflow DAG files on raftsched: replace ``airflow`` with ``raftsched.airflow`` in the imports.

    from raftsched.airflow import DAG                          # was: from airflow import DAG
    from raftsched.airflow.operators.bash import BashOperator  # was: airflow.operators.bash

The submodules have Airflow 2's paths (``decorators``, ``models``, ``models.dag``,
``models.param``, ``operators.bash|python|empty``, ``utils.task_group``,
``utils.trigger_rule``, ``utils.edgemodifier``, ``exceptions``), Airflow 3's ``sdk`` and
``providers.standard.operators.*``. Each maps Airflow's names onto raftsched's authoring API
(:mod:`raftsched.dags`): everything still compiles to a ``DagSpec``. A name raftsched lacks
raises :class:`NotSupportedError` saying what to use instead. docs/migrating-from-airflow.md
lists both.
"""

from __future__ import annotations

from raftsched.airflow._dag import DAG
from raftsched.airflow._unsupported import NotSupportedError

__all__ = ["DAG", "NotSupportedError"]
