"""``airflow.utils.context``: ``Context``, the type of a task's context (a dict here)."""

from __future__ import annotations

from typing import Any

Context = dict[str, Any]

__all__ = ["Context"]
