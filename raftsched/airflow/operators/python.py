"""``airflow.operators.python``: ``PythonOperator``, ``BranchPythonOperator``,
``ShortCircuitOperator``, ``get_current_context``."""

from __future__ import annotations

from raftsched.airflow._context import get_current_context
from raftsched.airflow._operators import (
    BranchPythonOperator,
    PythonOperator,
    ShortCircuitOperator,
)
from raftsched.airflow._unsupported import missing_names

__getattr__ = missing_names(
    "airflow.operators.python",
    {
        "PythonVirtualenvOperator": "install the packages on the workers and use PythonOperator",
        "ExternalPythonOperator": "install the packages on the workers and use PythonOperator",
        "BranchPythonVirtualenvOperator": "use BranchPythonOperator",
        "BranchExternalPythonOperator": "use BranchPythonOperator",
    },
)

__all__ = [
    "BranchPythonOperator",
    "PythonOperator",
    "ShortCircuitOperator",
    "get_current_context",
]
