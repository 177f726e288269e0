"""The generic checks every DAG and task option goes through: ids, counts, durations, bounds.

Each raises DagDefinitionError naming the value and what is allowed; :func:`bounded` turns a
``raftsched.core.limits`` check's LimitExceeded into one. The DAG-level and whole-spec checks
are in :mod:`raftsched.dags.validation`, the task-level ones in :mod:`raftsched.dags.task_checks`;
``validation`` re-exports every name here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from raftsched.core import limits
from raftsched.errors import DagDefinitionError, LimitExceeded

ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,250}")


def bounded(
    check: Callable[..., Any], *args: Any, where: str, dag_id: str = "", task_id: str = ""
) -> Any:
    """``check(*args)`` (a ``limits`` check) with LimitExceeded as DagDefinitionError."""
    try:
        return check(*args)
    except LimitExceeded as err:
        raise DagDefinitionError(f"{where}: {err}", dag_id=dag_id, task_id=task_id) from None


def check_id(kind: str, value: object, *, dag_id: str = "") -> str:
    """``kind`` is "dag_id" or "task_id"."""
    task_id = str(value) if kind == "task_id" else ""
    if not isinstance(value, str):
        raise DagDefinitionError(
            f"{kind} must be a string, got {type(value).__name__} {value!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    if not ID_PATTERN.fullmatch(value):
        if not value or len(value) > 250:
            why = f"it must be 1 to 250 characters long (it has {len(value)})"
        else:
            bad = sorted({ch for ch in value if not re.fullmatch(r"[A-Za-z0-9_.-]", ch)})
            why = f"{''.join(bad)!r} not allowed; use letters, digits, '_', '.' and '-'"
        raise DagDefinitionError(
            f"invalid {kind} {value[:60]!r}: {why}", dag_id=dag_id, task_id=task_id
        )
    return value


def check_count(
    value: object,
    what: str,
    *,
    minimum: int,
    dag_id: str,
    task_id: str = "",
    maximum: int | None = None,
) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DagDefinitionError(
            f"{what} must be an integer >= {minimum}, got {value!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    if maximum is not None and value > maximum:
        shown = value if value < 10**30 else f"a {value.bit_length()}-bit integer"
        raise DagDefinitionError(
            f"{what} must be at most {maximum}, got {shown}", dag_id=dag_id, task_id=task_id
        )
    return value


def check_duration(
    value: object, what: str, *, dag_id: str, task_id: str = "", positive: bool = False
) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise DagDefinitionError(
            f"{what} must be a timedelta, got {type(value).__name__} {value!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    seconds = value.total_seconds()
    if seconds < 0 or (positive and seconds == 0):
        raise DagDefinitionError(
            f"{what} must be {'positive' if positive else 'zero or more'}, got {value}",
            dag_id=dag_id,
            task_id=task_id,
        )
    if seconds > limits.MAX_DURATION_SECONDS:
        raise DagDefinitionError(
            f"{what} must be at most {limits.MAX_DURATION_SECONDS} seconds (366 days), got {value}",
            dag_id=dag_id,
            task_id=task_id,
        )
    return seconds


def short_repr(value: object) -> str:
    """repr of a value for an error message, at most 200 characters."""
    try:
        shown = repr(value)
    except Exception:  # a hostile __repr__, a RecursionError
        shown = f"<{type(value).__name__}>"
    return shown if len(shown) <= 200 else shown[:197] + "..."
