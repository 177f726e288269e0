"""Task groups: ``with TaskGroup("extract"):`` prefixes the ids of the tasks made inside it.

    with DAG("etl", schedule=None):
        with TaskGroup("extract") as extract:   # tasks "extract.orders", "extract.users"
            BashTask("orders", command="...")
            BashTask("users", command="...")
        load = BashTask("load", command="...")
        extract >> load                         # every leaf of the group before load

A group is an authoring aid only: it leaves nothing in the ``DagSpec`` but the prefixed ids
and the edges, as Airflow's ``TaskGroup`` leaves nothing but those in the graph. ``group >>
x`` links the group's leaves (its tasks with no downstream inside it) to ``x``; ``x >>
group`` links ``x`` to its roots (no upstream inside it). Groups nest: ids join with ``.``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from raftsched.dags import validation as v
from raftsched.errors import DagDefinitionError

if TYPE_CHECKING:
    from raftsched.dags.tasks import Task

_groups: list[TaskGroup] = []  # the groups of enclosing `with TaskGroup(...)` blocks


def qualify(task_id: str) -> str:
    """``task_id`` inside the innermost open group (``group.task_id``), or as it is."""
    group = current()
    if group is None or not group.prefix_group_id or not isinstance(task_id, str):
        return task_id
    return f"{group.group_id}.{task_id}"


def current() -> TaskGroup | None:
    return _groups[-1] if _groups else None


def default_args() -> dict[str, Any]:
    """The ``default_args`` of the open groups, inner ones over outer ones."""
    out: dict[str, Any] = {}
    for group in _groups:
        out.update(group.default_args)
    return out


def joined(task: Task) -> None:
    """Record ``task`` in every open group (a task of an inner group belongs to the outer)."""
    for group in _groups:
        group.members.append(task)


class TaskGroup:
    """A named set of tasks: ``with TaskGroup("g"):`` (ids ``g.x``), ``>>``/``<<`` on it."""

    raftsched_edge = True  # Task.__rshift__ leaves `task >> group` to __rrshift__

    def __init__(
        self,
        group_id: str,
        *,
        prefix_group_id: bool = True,
        tooltip: str = "",
        default_args: dict[str, Any] | None = None,  # raftsched.airflow's tasks take them
        **_ignored: Any,  # Airflow's ui_color, ui_fgcolor...: UI only
    ) -> None:
        parent = current()
        full = f"{parent.group_id}.{group_id}" if parent and parent.prefix_group_id else group_id
        self.group_id = v.check_id("group_id", full)
        self.prefix_group_id = bool(prefix_group_id)
        self.tooltip = tooltip
        self.members: list[Task] = []
        self.default_args = dict(default_args or {})

    def __enter__(self) -> TaskGroup:
        _groups.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _groups.remove(self)

    def __repr__(self) -> str:
        return f"<TaskGroup {self.group_id}>"

    def __iter__(self) -> Iterator[Task]:
        return iter(self.members)

    def roots(self) -> list[Task]:
        ids = {t.task_id for t in self.members}
        return [t for t in self.members if not (t.upstream & ids)]

    def leaves(self) -> list[Task]:
        inner_upstream = {up for t in self.members for up in t.upstream}
        return [t for t in self.members if t.task_id not in inner_upstream]

    def _check_not_empty(self) -> None:
        if not self.members:
            raise DagDefinitionError(f"task group {self.group_id!r} has no tasks to link")

    def set_downstream(self, other: Any) -> None:
        self._check_not_empty()
        for leaf in self.leaves():
            leaf.set_downstream(other)

    def set_upstream(self, other: Any) -> None:
        self._check_not_empty()
        for root in self.roots():
            root.set_upstream(other)

    def __rshift__(self, other: Any) -> Any:  # group >> other
        if _defers(other):
            return NotImplemented
        self.set_downstream(other)
        return other

    def __lshift__(self, other: Any) -> Any:  # group << other
        if _defers(other):
            return NotImplemented
        self.set_upstream(other)
        return other

    def __rrshift__(self, other: Any) -> TaskGroup:  # task >> group, [a, b] >> group
        self.set_upstream(other)
        return self

    def __rlshift__(self, other: Any) -> TaskGroup:  # task << group
        self.set_downstream(other)
        return self


def _defers(other: Any) -> bool:
    """An edge object other than a group (an edge label) links itself (``__rrshift__``)."""
    return getattr(other, "raftsched_edge", False) and not isinstance(other, TaskGroup)


__all__ = ["TaskGroup", "current", "default_args", "joined", "qualify"]
