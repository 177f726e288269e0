"""``XComArg.map(fn)`` (Airflow's): map a task over an upstream task's output, each item
passed through ``fn`` first.

    @task
    def files() -> list[str]:
        return ["a.csv", "b.csv"]

    @task
    def load(path: str) -> None: ...

    load.expand(path=files().map(lambda name: f"/data/{name}"))

The expansion is the one of the plain output (the scheduler counts the same items,
``core/mapping.py``: ``map`` is one item for one item); ``fn`` runs on the worker, in the
mapped instance's own attempt, on the item it gets, before the task function is called
(``apply``). So ``fn`` is any callable of the DAG file (a lambda too: the worker imports the
file and finds it again through the task's registered callable), its result need not be
JSON, and an error in it fails that instance alone, as in Airflow. Only ``@task`` functions
mapped with ``.expand()`` take such an argument; ``.zip()`` and ``.concat()`` are not
supported yet (the error says what to do instead).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MethodType
from typing import TYPE_CHECKING, Any

from raftsched.dags.taskflow import XComArg
from raftsched.errors import DagDefinitionError

if TYPE_CHECKING:
    from raftsched.dags.tasks import Task

TRANSFORMS = "item_transforms"  # attribute of a registered callable: name -> functions
COMBINE_HINT = (
    "have a @task build the combined list (zip(a, b), a + b) from both outputs, and"
    " .expand() over its output"
)


class MappedXComArg(XComArg):
    """An XComArg whose items pass through ``transforms`` (``.map(fn)``, in order)."""

    def __init__(self, arg: XComArg, transforms: tuple[Callable[[Any], Any], ...]) -> None:
        super().__init__(arg.operator, arg.path)
        self.transforms = transforms

    def __getitem__(self, key: str | int) -> XComArg:
        raise DagDefinitionError(
            f"{self!r}: index the output before .map() (output[{key!r}].map(fn)), or in fn",
            dag_id=self.operator.dag.dag_id,
            task_id=self.operator.task_id,
        )


def mapped(arg: XComArg, fn: Any) -> XComArg:
    """``arg.map(fn)``: ``arg`` whose items pass through ``fn`` (after any earlier map)."""
    ids = {"dag_id": arg.operator.dag.dag_id, "task_id": arg.operator.task_id}
    if not callable(fn):
        raise DagDefinitionError(f"{arg!r}.map() takes a function, got {fn!r}", **ids)
    return MappedXComArg(arg, (*getattr(arg, "transforms", ()), fn))


def refuse_combine(arg: XComArg) -> Any:
    raise DagDefinitionError(
        f"{arg!r}: .zip() and .concat() are not supported yet: {COMBINE_HINT}",
        dag_id=arg.operator.dag.dag_id,
        task_id=arg.operator.task_id,
    )


def refuse_plain(arg: Any) -> None:
    """A mapped XComArg passed where no expansion takes it (a plain argument)."""
    if getattr(arg, "transforms", ()):
        raise DagDefinitionError(
            f"{arg!r}.map(...) can only be expanded over (task.expand(name=output.map(fn)));"
            " to pass the transformed list as one argument, transform it in the task",
            dag_id=arg.operator.dag.dag_id,
            task_id=arg.operator.task_id,
        )


def attach(task: Task, mapped_args: Mapping[str, Any]) -> None:
    """``task`` was expanded over ``mapped_args``: the ``.map()`` functions of each go onto
    the task's registered callable, which :func:`apply` s them on the worker."""
    from raftsched.dags.taskflow import registered_callable

    transforms = {
        name: tuple(value.transforms)
        for name, value in mapped_args.items()
        if getattr(value, "transforms", ())
    }
    if not transforms:
        return
    target = registered_callable(getattr(task, "callable_name", "") or "")
    if isinstance(target, MethodType):
        target = None  # a bound method (a sensor's): nothing to hang the functions on
    if target is None:
        raise DagDefinitionError(
            f"task {task.task_id!r} maps over an XComArg's .map(...): only @task functions"
            " take one; for an operator, have a @task build the list it maps over",
            dag_id=task.dag.dag_id,
            task_id=task.task_id,
        )
    setattr(target, TRANSFORMS, transforms)


def apply(target: object, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` of an attempt of ``target`` (a registered callable) with each mapped item
    passed through its ``.map()`` functions, in order."""
    transforms: Mapping[str, tuple[Callable[[Any], Any], ...]] = getattr(target, TRANSFORMS, {})
    for name, functions in transforms.items():
        if name in kwargs:
            value = kwargs[name]
            for function in functions:
                value = function(value)
            kwargs[name] = value
    return kwargs


__all__ = ["MappedXComArg", "apply", "attach", "mapped", "refuse_combine", "refuse_plain"]
