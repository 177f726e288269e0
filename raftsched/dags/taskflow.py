"""TaskFlow: ``@dag`` and ``@task`` (``@task.bash``, ``@task.branch``), as Airflow writes them.

    from raftsched import dag, task

    @dag(schedule=None, start_date=datetime(2024, 1, 1))
    def etl():
        @task
        def extract() -> dict:
            return {"rows": 3}

        @task
        def load(data: dict) -> None:
            print(data["rows"])

        load(extract())      # load runs after extract, with extract's return value

    etl()

- Calling a ``@task`` function inside a DAG (a ``@dag`` function or ``with DAG(...)``) adds a
  task (its id: the function's name, then ``__1``, ``__2``... when taken; ``.override(
  task_id=...)`` names it) and returns an :class:`XComArg`: passed to another task it wires
  the dependency and, on the worker, becomes the upstream's return value
  (:mod:`raftsched.dags.xcom_args`); ``arg["key"]`` passes one item of it; ``>>``/``<<``
  work as on tasks.
- Arguments (in the spec) and return values are JSON; a value at most 64 KiB (``core.xcom``).
- ``@task.bash``: the function returns a command line, run with ``bash -c`` on the worker;
  exit code ``skip_on_exit_code`` (99, as Airflow) ends the attempt SKIPPED.
- ``@task.branch``: returns the task id (or ids) to follow among its direct downstream tasks;
  the others are skipped, and trigger rules carry the skips on (``core.ready``).
- Workers import the DAG file and find each task's function under ``@taskflow:DAG:TASK`` (its
  ``callable_name``): it may be nested in the ``@dag`` function.
"""

from __future__ import annotations

import functools
import inspect
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from raftsched.dags import mapping, task_groups
from raftsched.dags import validation as v
from raftsched.dags.dag import DAG, _context
from raftsched.dags.task_checks import TASKFLOW_PREFIX
from raftsched.dags.tasks import Task, declare_secrets
from raftsched.dags.xcom_args import placeholder
from raftsched.errors import DagDefinitionError, TaskSkipped

AIRFLOW_BASH_SKIP_CODE = 99  # Airflow's skip_on_exit_code default for bash

# (dag_id, task_id) -> the callable a worker runs: filled while a DAG file is imported
_registry: dict[tuple[str, str], TaskCallable] = {}


class TaskCallable:
    """What a worker calls for a TaskFlow task (``_run_python.call``): the function, and for
    ``@task.bash`` the command it returns run with bash."""

    raftsched_taskflow = True  # _run_python: strict return values (TaskFlow's contract)

    def __init__(
        self, function: Callable[..., Any], *, branch: bool, bash: bool, skip_code: int | None
    ) -> None:
        self.function = function
        self.branch = branch
        self.bash = bash
        self.skip_on_exit_code = skip_code

    def __call__(self, **kwargs: Any) -> Any:
        value = self.function(**_xcom_map().apply(self, kwargs))  # items through .map()s
        if not self.bash:
            return value
        if not isinstance(value, str) or not value.strip():
            raise TypeError(f"a @task.bash function must return a command line, got {value!r}")
        sys.stdout.flush()
        sys.stderr.flush()
        code = subprocess.call(["bash", "-c", value])  # its output goes where ours goes
        if self.skip_on_exit_code is not None and code == self.skip_on_exit_code:
            raise TaskSkipped(f"exit code {code} (skip_on_exit_code)")
        if code:
            print(f"bash exited with code {code}", file=sys.stderr)
            raise SystemExit(code if 0 < code < 256 else 1)
        return None


def register(dag_id: str, task_id: str, function: Callable[..., Any]) -> None:
    """What a worker calls for task ``task_id`` of ``dag_id`` (its ``callable_name`` is
    ``@taskflow:DAG_ID:TASK_ID``); other layers (raftsched.airflow) register theirs here."""
    _registry[(dag_id, task_id)] = function  # type: ignore[assignment]


def registered_callable(callable_name: str) -> TaskCallable | None:
    """The TaskFlow callable named ``@taskflow:DAG_ID:TASK_ID``; None if the import did not
    build that task."""
    _, _, rest = callable_name.partition(TASKFLOW_PREFIX)
    dag_id, _, task_id = rest.partition(":")
    return _registry.get((dag_id, task_id))


class TaskFlowTask(Task):
    """A task built by calling a ``@task`` function: a python task whose kwargs may hold
    XCom placeholders, run through the registry (:class:`TaskCallable`)."""

    kind = "python"

    def __init__(self, task_id: str, *, dag: DAG, kwargs: dict[str, Any], **options: Any) -> None:
        # a @task call picks its id with the group's prefix (and a free suffix) itself
        self.id_qualified = type(self) is TaskFlowTask
        secrets = options.pop("secrets", None)
        connections = options.pop("connections", None)
        super().__init__(task_id, dag=dag, **options)
        ids = {"dag_id": dag.dag_id, "task_id": self.task_id}
        self.callable_name = f"{TASKFLOW_PREFIX}{dag.dag_id}:{self.task_id}"
        self.kwargs_json = v.check_kwargs(kwargs, **ids)
        self.declared_secrets = declare_secrets(self, secrets, connections)

    def _spec_fields(self) -> dict[str, Any]:
        return {"callable_name": self.callable_name, "kwargs_json": self.kwargs_json}


class XComArg:
    """The output of a TaskFlow task call: an argument for other tasks, and a handle on the
    task for ``>>``/``<<``. ``arg["key"]`` (or ``arg[0]``) is one item of the value."""

    def __init__(self, task: Task, path: tuple[str | int, ...] = ()) -> None:
        self.operator = task
        self.path = path

    def __getitem__(self, key: str | int) -> XComArg:
        if not isinstance(key, str | int) or isinstance(key, bool):
            raise DagDefinitionError(
                f"an XComArg item must be a str or int key, got {type(key).__name__}",
                dag_id=self.operator.dag.dag_id,
                task_id=self.operator.task_id,
            )
        return XComArg(self.operator, (*self.path, key))

    def __iter__(self) -> Any:  # not a sequence: __getitem__ is for items of its value
        raise TypeError("an XComArg is not iterable: pass it to a task, or index one item")

    def map(self, fn: Any) -> XComArg:  # Airflow's XComArg.map (dags/xcom_map.py)
        return _xcom_map().mapped(self, fn)

    def zip(self, *_: Any, **__: Any) -> Any:  # .zip(), .concat(): not yet (the error says)
        return _xcom_map().refuse_combine(self)

    concat = zip

    def __repr__(self) -> str:
        where = "".join(f"[{p!r}]" for p in self.path)
        return f"<XComArg {self.operator.task_id}{where}>"

    def __rshift__(self, other: Any) -> Any:
        if getattr(other, "raftsched_edge", False):
            return NotImplemented  # a task group or an edge label links itself
        self.operator.set_downstream(unwrap(other))
        return other

    def __lshift__(self, other: Any) -> Any:
        if getattr(other, "raftsched_edge", False):
            return NotImplemented
        self.operator.set_upstream(unwrap(other))
        return other

    def __rrshift__(self, other: Any) -> XComArg:
        self.operator.set_upstream(unwrap(other))
        return self

    def __rlshift__(self, other: Any) -> XComArg:
        self.operator.set_downstream(unwrap(other))
        return self


def unwrap(other: Any) -> Any:
    """Tasks for ``>>``: an XComArg stands for its task, in lists too."""
    if isinstance(other, XComArg):
        return other.operator
    if isinstance(other, list | tuple | set):
        return [unwrap(item) for item in other]
    return other


def _task_options() -> frozenset[str]:
    """What ``@task(...)`` takes: every option of ``Task`` (other helpers add some), plus the
    task id and the declared secrets."""
    names = set(inspect.signature(Task.__init__).parameters) - {"self", "task_id", "dag"}
    return frozenset(names | {"task_id", "secrets", "connections", "max_map_length"})


_TASK_OPTIONS = _task_options()


class TaskFactory:
    """A ``@task`` function: calling it inside a DAG adds a task and returns its XComArg."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        branch: bool = False,
        bash: bool = False,
        skip_on_exit_code: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        if not callable(function):
            raise DagDefinitionError(f"@task decorates a function, got {type(function).__name__}")
        self.function = function
        self.branch = branch
        self.bash = bash
        self.skip_on_exit_code = skip_on_exit_code
        self.options = dict(options or {})
        unknown = sorted(set(self.options) - _TASK_OPTIONS)
        if unknown:
            raise DagDefinitionError(
                f"@task {function.__name__!r}: unknown options {', '.join(unknown)}; allowed:"
                f" {', '.join(sorted(_TASK_OPTIONS))}"
            )
        functools.update_wrapper(self, function)  # type: ignore[arg-type]
        self._binding_partial = False  # while .expand_kwargs() adds the task

    # -- dynamic task mapping (dags/mapping.py) ----------------------------------------------
    def partial(self, **fixed: Any) -> PartialTaskFlow:
        """The arguments every instance gets; ``.expand(...)`` maps the others."""
        return PartialTaskFlow(self, fixed)

    def expand(self, **mapped: Any) -> XComArg:
        """Add the task mapped: one instance per combination of the arguments' items."""
        return self.partial().expand(**mapped)

    def expand_kwargs(self, source: Any) -> XComArg:
        """Add the task mapped: one instance per dict of arguments in ``source``."""
        return self.partial().expand_kwargs(source)

    def override(self, **options: Any) -> TaskFactory:
        """The same task function with other options (``.override(task_id="load_b")``)."""
        return TaskFactory(
            self.function,
            branch=self.branch,
            bash=self.bash,
            skip_on_exit_code=options.pop("skip_on_exit_code", self.skip_on_exit_code),
            options={**self.options, **options},
        )

    def __call__(self, *args: Any, **kwargs: Any) -> XComArg:
        dag = _context[-1] if _context else None
        name = self.function.__name__
        if dag is None:
            raise DagDefinitionError(
                f"task function {name!r} was called outside a DAG: call it inside a @dag"
                " function or a `with DAG(...):` block",
                task_id=name,
            )
        options = dict(self.options)
        task_id = _free_id(dag, task_groups.qualify(str(options.pop("task_id", None) or name)))
        bound = options.pop("max_map_length", None)
        upstream: list[Task] = []
        arguments = _bind(
            self.function, args, kwargs, dag.dag_id, task_id, partial=self._binding_partial
        )
        arguments = {k: _encode(value, upstream) for k, value in arguments.items()}
        built = TaskFlowTask(task_id, dag=dag, kwargs=arguments, **options)
        if bound is not None:
            built.max_map_length = mapping.check_max_map_length(
                bound, dag_id=dag.dag_id, task_id=task_id
            )
        for up in upstream:
            if up.dag is not dag:
                raise DagDefinitionError(
                    f"task {task_id!r} takes the output of {up.task_id!r} of another DAG"
                    f" ({up.dag.dag_id!r})",
                    dag_id=dag.dag_id,
                    task_id=task_id,
                )
            built.set_upstream(up)
        register(
            dag.dag_id,
            task_id,
            TaskCallable(
                self.function, branch=self.branch, bash=self.bash, skip_code=self.skip_on_exit_code
            ),
        )
        return XComArg(built)


class PartialTaskFlow:
    """``my_task.partial(**fixed)``: a TaskFlow task waiting for what it maps over."""

    def __init__(self, factory: TaskFactory, fixed: dict[str, Any]) -> None:
        self.factory = factory
        self.fixed = fixed

    def expand(self, **mapped: Any) -> XComArg:
        taken = sorted(set(mapped) & set(self.fixed))
        if taken:
            raise DagDefinitionError(f"{', '.join(taken)} given to both partial() and expand()")
        output = self.factory(**self.fixed, **dict.fromkeys(mapped))  # None until its item
        mapping.expand_args(output.operator, mapped)
        return output

    def expand_kwargs(self, source: Any) -> XComArg:
        self.factory._binding_partial = True
        try:
            output = self.factory(**self.fixed)
        finally:
            self.factory._binding_partial = False
        mapping.expand_kwargs(output.operator, source)
        return output


def _free_id(dag: DAG, wanted: str) -> str:
    """``wanted``, or ``wanted__1``, ``wanted__2``... when the DAG has it (as Airflow)."""
    if wanted not in dag.tasks:
        return wanted
    n = 1
    while f"{wanted}__{n}" in dag.tasks:
        n += 1
    return f"{wanted}__{n}"


def _bind(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dag_id: str,
    task_id: str,
    *,
    partial: bool = False,
) -> dict[str, Any]:
    """The call's arguments by name (the worker calls the function with keywords only);
    ``partial``: some may be missing (each mapped instance brings them)."""
    signature = inspect.signature(function)
    try:
        bound = (
            signature.bind_partial(*args, **kwargs) if partial else signature.bind(*args, **kwargs)
        )
    except TypeError as err:
        raise DagDefinitionError(
            f"task {task_id!r}: {err}", dag_id=dag_id, task_id=task_id
        ) from None
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise DagDefinitionError(
                    f"task {task_id!r}: *{name} cannot be passed to a task (workers call it"
                    " with keyword arguments); name the parameters",
                    dag_id=dag_id,
                    task_id=task_id,
                )
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif kind is inspect.Parameter.POSITIONAL_ONLY:
            raise DagDefinitionError(
                f"task {task_id!r}: positional-only parameter {name!r} cannot be passed by"
                " keyword on the worker",
                dag_id=dag_id,
                task_id=task_id,
            )
        else:
            out[name] = value
    return out


def _xcom_map() -> Any:  # (dags/xcom_map.py builds on XComArg, defined here)
    from raftsched.dags import xcom_map

    return xcom_map


def _encode(value: Any, upstream: list[Task]) -> Any:
    """``value`` with each XComArg as a placeholder (its task noted as upstream)."""
    if isinstance(value, XComArg):
        _xcom_map().refuse_plain(value)  # a .map() output is for .expand() only
        upstream.append(value.operator)
        return placeholder(value.operator.task_id, value.path)
    if isinstance(value, Task):
        raise DagDefinitionError(
            f"task {value.task_id!r} passed as an argument: pass the output of a @task call,"
            " or wire classic tasks with >>",
            dag_id=value.dag.dag_id,
            task_id=value.task_id,
        )
    if isinstance(value, dict):
        return {k: _encode(v, upstream) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v, upstream) for v in value]
    return value


__all__ = [
    "TaskCallable",
    "TaskFactory",
    "TaskFlowTask",
    "XComArg",
    "registered_callable",
    "unwrap",
]
