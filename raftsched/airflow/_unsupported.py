"""Airflow names raftsched does not offer (yet): each raises an error naming what to use.

A module of this package lists its missing names in ``_MISSING`` and gets them through
:func:`missing_names` (a module ``__getattr__``), so ``from raftsched.airflow.x import Name``
fails at import with the alternative in the message, not with a bare ImportError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from raftsched.errors import DagDefinitionError

DOC = "docs/migrating-from-airflow.md"


class NotSupportedError(DagDefinitionError, ImportError):
    """An Airflow name or option raftsched does not offer; the message says what to use.
    An ImportError too, so ``try: from airflow... except ImportError`` still works."""


def refuse(what: str, hint: str, *, dag_id: str = "", task_id: str = "") -> NoReturn:
    raise NotSupportedError(
        f"{what} is not supported by raftsched: {hint} (see {DOC})",
        dag_id=dag_id,
        task_id=task_id,
    )


def missing_names(module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that refuses ``names`` (name -> what to use instead)."""

    def __getattr__(name: str) -> Any:
        if name in names:
            refuse(f"{module}.{name}", names[name])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["NotSupportedError", "missing_names", "refuse"]
