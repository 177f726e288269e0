"""``airflow.utils.edgemodifier``: ``Label`` (``a >> Label("ok") >> b``).

The label is accepted and dropped: the edge ``a >> b`` is what the DAG keeps (the web UI
shows no edge labels yet).
"""

from __future__ import annotations

from typing import Any


class Label:
    """An edge label: ``a >> Label("why") >> b`` links ``a`` to ``b``."""

    raftsched_edge = True  # a task's >> leaves `task >> label` to __rrshift__

    def __init__(self, label: str) -> None:
        self.label = label
        self._upstream: list[Any] = []

    def __rrshift__(self, other: Any) -> Label:  # a >> Label(...)
        bound = Label(self.label)
        bound._upstream = list(other) if isinstance(other, list | tuple) else [other]
        return bound

    def __rshift__(self, other: Any) -> Any:  # Label(...) >> b
        for upstream in self._upstream:
            upstream >> other
        return other

    def __rlshift__(self, other: Any) -> Label:  # b << Label(...)
        bound = Label(self.label)
        bound._upstream = list(other) if isinstance(other, list | tuple) else [other]
        return bound

    def __lshift__(self, other: Any) -> Any:  # Label(...) << a, as in b << Label(...) << a
        for downstream in self._upstream:
            downstream << other
        return other

    def __repr__(self) -> str:
        return f"Label({self.label!r})"


__all__ = ["Label"]
