"""Airflow's ``Variable`` inside a task: ``Variable.get`` reads a variable the task declared.

Airflow reads any variable from its database whenever code asks, at parse time too.
raftsched hands a task the variables it declared (``secrets=["NAME"]`` on the operator or
``@task``; a template's ``{{ var.value.NAME }}`` declares itself), fetched by the worker for
that attempt only; an undeclared one, or a read while the DAG file is parsed, is a KeyError
saying how to declare it. Writing (``Variable.set``/``delete``) is refused: variables are set
with ``raftsched variables set``.

``AIRFLOW_VAR_<KEY>`` in the task's environment is read first, as Airflow's environment
secrets backend does (a worker passes those of its own environment to every attempt,
masked: ``worker/task_secrets.py``); ``deserialize_json=True`` parses the value as JSON.
"""

from __future__ import annotations

import json
import os
from typing import Any

from raftsched import airflow_secrets, secrets
from raftsched.airflow._unsupported import refuse

_NOTHING: Any = object()


class Variable:
    """``Variable.get("NAME", default_var=..., deserialize_json=False)``."""

    @staticmethod
    def get(key: str, default_var: Any = _NOTHING, deserialize_json: bool = False) -> Any:
        # Airflow's environment backend first (AIRFLOW_VAR_<KEY>), as Airflow asks it before
        # its database; then what the worker resolved for this attempt
        text = os.environ.get(airflow_secrets.var_env(key))
        try:
            text = secrets.get_variable(key) if text is None else text
        except KeyError:
            if default_var is not _NOTHING:
                return default_var
            raise
        return json.loads(text) if deserialize_json else text

    @staticmethod
    def set(*args: Any, **kwargs: Any) -> None:
        refuse("Variable.set", "set it with `raftsched variables set NAME VALUE`")

    @staticmethod
    def delete(*args: Any, **kwargs: Any) -> None:
        refuse("Variable.delete", "use `raftsched variables delete NAME`")


__all__ = ["Variable"]
