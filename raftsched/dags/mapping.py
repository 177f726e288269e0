"""Dynamic task mapping on the authoring side: what ``.expand()``/``.expand_kwargs()`` record.

A mapped task is an ordinary task plus its expansion (``TaskSpec.expand_json``, read by
``core/mapping.py``): the names it maps and, for each, a literal list or an upstream task's
return value (an ``XComArg``, which also makes that task upstream). The scheduler expands it
when it becomes ready, one task instance per item (``task_id[i]``), at most
``max_map_length`` of them (the task's, else the DAG's, else ``[core] max_map_length``,
default 1,024).

    @task
    def numbers() -> list[int]:
        return [1, 2, 3]

    @task
    def double(x: int, factor: int) -> int:
        return x * factor

    @task
    def total(values: list[int]) -> None:
        print(sum(values))          # [2, 4, 6]: the instances' values in map index order

    total(double.partial(factor=2).expand(x=numbers()))

    BashTask.partial(task_id="say").expand(command=["echo a", "echo b"])
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from raftsched.core import limits
from raftsched.core import mapping as core_mapping
from raftsched.errors import DagDefinitionError

if TYPE_CHECKING:
    from raftsched.dags.tasks import Task

MAX_MAP_LENGTH_ENV = "RAFTSCHED_MAX_MAP_LENGTH"  # [core] max_map_length, set by the parser
_child_env: dict[str, str] = {}  # what the parser's children get (configure)


def configure(max_map_length: int) -> None:
    """``[core] max_map_length`` for every DAG-parse child this process starts from now on."""
    _child_env[MAX_MAP_LENGTH_ENV] = str(int(max_map_length))


def child_env() -> dict[str, str]:
    return dict(_child_env)


def default_max_map_length() -> int:
    """``[core] max_map_length`` as the parser hands it to its child (0: the core's 1,024)."""
    text = os.environ.get(MAX_MAP_LENGTH_ENV, "")
    return int(text) if text.isdigit() else 0


def check_max_map_length(value: object, *, dag_id: str, task_id: str = "") -> int:
    """A max_map_length as given to a task or DAG: 1..MAX_MAP_LENGTH."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DagDefinitionError(
            f"max_map_length must be an integer, got {type(value).__name__}",
            dag_id=dag_id,
            task_id=task_id,
        )
    if not 1 <= value <= limits.MAX_MAP_LENGTH:
        raise DagDefinitionError(
            f"max_map_length is {value}; allowed is 1..{limits.MAX_MAP_LENGTH}",
            dag_id=dag_id,
            task_id=task_id,
        )
    return value


def source_of(value: Any, task_id: str, name: str, dag_id: str, upstream: list[Task]) -> Any:
    """What ``name`` maps over, as the expansion records it: a literal list (JSON-able), or
    an upstream's return value (a placeholder; its task noted in ``upstream``)."""
    from raftsched.dags.taskflow import XComArg

    if isinstance(value, XComArg):
        upstream.append(value.operator)
        ref: dict[str, Any] = {core_mapping.XCOM_REF: value.operator.task_id}
        if value.path:
            ref["path"] = list(value.path)
        return ref
    if isinstance(value, list | tuple):
        if len(value) > limits.MAX_MAP_LENGTH:
            raise DagDefinitionError(
                f"task {task_id!r} maps {name} over {len(value)} literal items; the limit is"
                f" {limits.MAX_MAP_LENGTH}",
                dag_id=dag_id,
                task_id=task_id,
            )
        items = list(value)
        try:
            json.dumps(items, allow_nan=False)
        except (TypeError, ValueError) as err:
            raise DagDefinitionError(
                f"task {task_id!r} maps {name} over a list that is not JSON-able ({err})",
                dag_id=dag_id,
                task_id=task_id,
            ) from None
        return items
    raise DagDefinitionError(
        f"task {task_id!r} maps {name} over {type(value).__name__}: map over a list, or the"
        " output of a task (an XComArg)",
        dag_id=dag_id,
        task_id=task_id,
    )


def expand_args(
    task: Task, mapped: Mapping[str, Any], *, allowed: Sequence[str] | None = None
) -> None:
    """``task.expand(name=source, ...)``: one instance per combination of the sources."""
    dag_id = task.dag.dag_id
    if not mapped:
        raise DagDefinitionError(
            f"task {task.task_id!r}: expand() needs at least one argument to map over",
            dag_id=dag_id,
            task_id=task.task_id,
        )
    if allowed is not None:
        unknown = sorted(set(mapped) - set(allowed))
        if unknown:
            raise DagDefinitionError(
                f"task {task.task_id!r} cannot map over {', '.join(unknown)}; it maps over"
                f" {', '.join(allowed)}",
                dag_id=dag_id,
                task_id=task.task_id,
            )
    upstream: list[Task] = []
    pairs = [
        [name, source_of(value, task.task_id, name, dag_id, upstream)]
        for name, value in mapped.items()
    ]
    _record(task, {"args": pairs}, upstream)
    from raftsched.dags import xcom_map  # (it imports taskflow, which imports us)

    xcom_map.attach(task, mapped)  # .map(fn) sources: fn runs on the worker, per item


def expand_kwargs(task: Task, source: Any) -> None:
    """``task.expand_kwargs(list_of_dicts)``: one instance per dict of arguments."""
    if getattr(source, "transforms", ()):
        raise DagDefinitionError(
            f"task {task.task_id!r}: expand_kwargs() over an XComArg's .map() is not supported"
            " yet: have the upstream @task return the list of dicts",
            dag_id=task.dag.dag_id,
            task_id=task.task_id,
        )
    upstream: list[Task] = []
    value = source_of(source, task.task_id, "its kwargs", task.dag.dag_id, upstream)
    if isinstance(value, list) and not all(isinstance(item, dict) for item in value):
        raise DagDefinitionError(
            f"task {task.task_id!r}: expand_kwargs() takes a list of dicts of arguments",
            dag_id=task.dag.dag_id,
            task_id=task.task_id,
        )
    _record(task, {"kwargs": value}, upstream)


def _record(task: Task, expansion: dict[str, Any], upstream: list[Task]) -> None:
    ids = {"dag_id": task.dag.dag_id, "task_id": task.task_id}
    if getattr(task, "expand_json", ""):
        raise DagDefinitionError(f"task {task.task_id!r} is mapped twice", **ids)
    if len(task.task_id) > core_mapping.MAX_MAPPED_TASK_ID_CHARS:
        raise DagDefinitionError(
            f"a mapped task's id has at most {core_mapping.MAX_MAPPED_TASK_ID_CHARS} characters"
            f" (its instances' ids add [n]); {task.task_id!r} has {len(task.task_id)}",
            **ids,
        )
    text = json.dumps(expansion, sort_keys=True, separators=(",", ":"))
    if len(text.encode()) > limits.MAX_EXPAND_BYTES:
        raise DagDefinitionError(
            f"task {task.task_id!r}: what it maps over is {len(text.encode())} bytes as JSON;"
            f" the limit is {limits.MAX_EXPAND_BYTES} (map over an upstream task's output)",
            **ids,
        )
    for up in upstream:
        if up.dag is not task.dag:
            raise DagDefinitionError(
                f"task {task.task_id!r} maps over the output of {up.task_id!r} of another DAG",
                **ids,
            )
        task.set_upstream(up)
    task.expand_json = text
    bound = getattr(task, "max_map_length", None) or getattr(task.dag, "max_map_length", None)
    task.max_map_length = bound or default_max_map_length()


class PartialTask:
    """``SomeTask.partial(task_id=..., **fixed)``: a task waiting for what it maps over."""

    def __init__(self, task_class: type[Task], options: dict[str, Any]) -> None:
        self.task_class = task_class
        self.options = dict(options)

    def expand(self, **mapped: Any) -> Task:
        """The mapped task: one instance per combination of the mapped arguments' items."""
        task = self._build(mapped)
        expand_args(task, mapped, allowed=getattr(task, "mappable", None))
        return task

    def expand_kwargs(self, source: Any) -> Task:
        """The mapped task: one instance per dict of arguments in ``source``."""
        task = self._build({})
        expand_kwargs(task, source)
        return task

    def _build(self, mapped: Mapping[str, Any]) -> Task:
        options = dict(self.options)
        bound = options.pop("max_map_length", None)
        taken = sorted(set(mapped) & set(options))
        if taken:
            raise DagDefinitionError(
                f"{', '.join(taken)} given to both partial() and expand()",
                task_id=str(options.get("task_id", "")),
            )
        stand_ins = {
            name: value
            for name, value in self.task_class.mapped_stand_ins.items()
            if name not in options
        }
        task = self.task_class(**{**stand_ins, **options})
        if bound is not None:
            task.max_map_length = check_max_map_length(
                bound, dag_id=task.dag.dag_id, task_id=task.task_id
            )
        return task


__all__ = [
    "MAX_MAP_LENGTH_ENV",
    "PartialTask",
    "check_max_map_length",
    "child_env",
    "configure",
    "default_max_map_length",
    "expand_args",
    "expand_kwargs",
    "source_of",
]
