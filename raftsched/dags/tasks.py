"""The tasks of a DAG file: ``Task`` (options, DAG membership, ``>>``/``<<``), ``BashTask``
and ``PythonTask``.

A task joins the DAG passed as ``dag=`` or that of the innermost enclosing ``with DAG(...)``
block, checks each option as it is given (:mod:`raftsched.dags.validation`) and becomes a
``TaskSpec`` in :meth:`raftsched.dags.dag.DAG.to_spec`. Re-exported by
:mod:`raftsched.dags.authoring`, the public authoring API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from raftsched.core import limits, past_deps
from raftsched.core.model import TaskSpec, TriggerRule
from raftsched.dags import mapping, task_groups
from raftsched.dags import validation as v
from raftsched.dags.assets import uris as asset_uris
from raftsched.dags.callbacks import task_callbacks
from raftsched.dags.dag import DAG, _context
from raftsched.errors import DagDefinitionError
from raftsched.secrets import DECLARATION_ENV, encode_declaration


class Task:
    """What BashTask and PythonTask share: options, DAG membership, dependencies."""

    kind = ""
    id_qualified = False  # True: task_id already has its task group's prefix (TaskFlow's)
    # Dynamic task mapping (dags/mapping.py): set by .partial(...).expand(...)
    expand_json = ""
    max_map_length: int | None = None
    # What a mapped argument holds until the worker gets its item (a required one's stand-in)
    mapped_stand_ins: dict[str, Any] = {}
    mappable: tuple[str, ...] | None = None  # the arguments .expand() may map (None: any)

    @classmethod
    def partial(cls, **options: Any) -> mapping.PartialTask:
        """The task's fixed arguments; ``.expand(name=list_or_xcom)`` or
        ``.expand_kwargs(list_of_dicts)`` then adds it, mapped (one instance per item)."""
        return mapping.PartialTask(cls, options)

    def __init__(
        self,
        task_id: str,
        *,
        dag: DAG | None = None,
        retries: int | None = None,
        retry_delay: timedelta | None = None,
        retry_exponential_backoff: bool = False,
        max_retry_delay: timedelta | None = None,
        execution_timeout: timedelta | None = None,
        priority_weight: int = 1,
        trigger_rule: str | TriggerRule = "all_success",
        queue: str | None = None,
        pool: str | None = None,
        pool_slots: int | None = None,
        depends_on_past: bool = False,
        wait_for_downstream: bool = False,
        ignore_first_depends_on_past: bool = False,
        outlets: Any = None,  # Assets a success emits an event of (raftsched.dags.assets)
        inlets: Any = None,  # Assets the task reads (in its context)
        **callbacks: Any,  # on_failure_callback, on_success_callback, on_retry_callback
    ) -> None:
        dag = dag if dag is not None else (_context[-1] if _context else None)
        if not self.id_qualified:  # "group.task" inside `with TaskGroup(...)`
            task_id = task_groups.qualify(task_id)
        if not isinstance(dag, DAG):
            raise DagDefinitionError(
                f"task {task_id!r} belongs to no DAG: create it inside `with DAG(...):` or pass"
                " dag=",
                task_id=str(task_id),
            )
        dag_id = dag.dag_id
        self.task_id = v.check_id("task_id", task_id, dag_id=dag_id)
        self.dag = dag
        where = f"of task {task_id!r} in DAG {dag_id!r}"
        ids = {"dag_id": dag_id, "task_id": task_id}
        self.retries = v.check_count(
            dag.default_retries if retries is None else retries,
            f"retries {where}",
            minimum=0,
            maximum=limits.MAX_RETRIES,
            **ids,
        )
        delay = v.check_duration(retry_delay, f"retry_delay {where}", **ids)
        self.retry_delay_seconds = dag.default_retry_delay if delay is None else delay
        self.retry_exponential_backoff = bool(retry_exponential_backoff)
        self.max_retry_delay_seconds = v.check_duration(
            max_retry_delay, f"max_retry_delay {where}", **ids
        )
        self.execution_timeout_seconds = v.check_duration(
            execution_timeout, f"execution_timeout {where}", positive=True, **ids
        )
        self.priority_weight = v.check_count(
            priority_weight,
            f"priority_weight {where}",
            minimum=-limits.MAX_PRIORITY_WEIGHT,
            maximum=limits.MAX_PRIORITY_WEIGHT,
            **ids,
        )
        self.trigger_rule = v.check_trigger_rule(trigger_rule, **ids)
        # Only workers serving this queue lease it (None: the DAG's default_queue)
        self.queue = dag.default_queue if queue is None else v.check_queue(queue, **ids)
        # Attempts take pool_slots slots of this pool (None, "default_pool": the default one)
        self.pool = v.check_pool(pool, **ids)
        self.pool_slots = v.check_pool_slots(pool_slots, **ids)
        # Ready only once the previous run's instance (and its downstream) did (core/past_deps.py)
        self.past_deps = past_deps.rule(
            bool(depends_on_past), bool(wait_for_downstream), bool(ignore_first_depends_on_past)
        )
        self.outlets = asset_uris(outlets, f"outlets {where}", **ids)
        self.inlets = asset_uris(inlets, f"inlets {where}", **ids)
        self.upstream: set[str] = set()
        self.callbacks = task_callbacks(
            callbacks, getattr(dag, "default_callbacks", {}), dag_id=dag_id, task_id=task_id
        )
        dag.add_task(self)
        task_groups.joined(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dag.dag_id}.{self.task_id}>"

    # -- dependencies ------------------------------------------------------------------------
    def set_downstream(self, other: Task | Iterable[Task]) -> None:
        for task in _tasks(other, self, "roots"):
            if task.dag is not self.dag:
                raise DagDefinitionError(
                    f"cannot link task {self.task_id!r} of DAG {self.dag.dag_id!r} to task"
                    f" {task.task_id!r} of DAG {task.dag.dag_id!r}: tasks must share a DAG",
                    dag_id=self.dag.dag_id,
                    task_id=self.task_id,
                )
            task.upstream.add(self.task_id)

    def set_upstream(self, other: Task | Iterable[Task]) -> None:
        for task in _tasks(other, self, "leaves"):
            task.set_downstream(self)

    def __rshift__(self, other: Any) -> Any:  # self >> other
        if getattr(other, "raftsched_edge", False):
            return NotImplemented  # a group or an edge label links itself (__rrshift__)
        self.set_downstream(other)
        return other

    def __lshift__(self, other: Any) -> Any:  # self << other
        if getattr(other, "raftsched_edge", False):
            return NotImplemented
        self.set_upstream(other)
        return other

    def __rrshift__(self, other: Any) -> Task:  # [a, b] >> self
        self.set_upstream(other)
        return self

    def __rlshift__(self, other: Any) -> Task:  # [a, b] << self
        self.set_downstream(other)
        return self

    # -- spec --------------------------------------------------------------------------------
    def _spec_fields(self) -> dict[str, Any]:
        return {}

    def to_spec(self) -> TaskSpec:
        spec = self._base_spec()
        declared = getattr(self, "declared_secrets", "")
        if declared:  # names only, as an env entry: the worker resolves them (raftsched.secrets)
            spec = replace(spec, env=tuple(sorted((*spec.env, (DECLARATION_ENV, declared)))))
        return spec

    def _base_spec(self) -> TaskSpec:
        return TaskSpec(
            task_id=self.task_id,
            kind=self.kind,
            retries=self.retries,
            retry_delay_seconds=float(self.retry_delay_seconds or 0.0),
            retry_exponential_backoff=self.retry_exponential_backoff,
            max_retry_delay_seconds=self.max_retry_delay_seconds,
            execution_timeout_seconds=self.execution_timeout_seconds,
            priority_weight=self.priority_weight,
            trigger_rule=self.trigger_rule,
            upstream=tuple(sorted(self.upstream)),
            queue=self.queue,
            pool=self.pool,
            pool_slots=self.pool_slots,
            callbacks=self.callbacks,
            past_deps=self.past_deps,
            outlets=self.outlets,
            inlets=self.inlets,
            **self._spec_fields(),
            **self._mapping_fields(),
        )

    def _mapping_fields(self) -> dict[str, Any]:
        if not self.expand_json:
            return {}
        return {"expand_json": self.expand_json, "max_map_length": self.max_map_length or 0}


def _tasks(other: object, source: Task, edge: str = "roots") -> list[Task]:
    """The tasks ``other`` stands for; a task group stands for its ``edge`` ("roots" when
    it is downstream of ``source``, "leaves" when upstream)."""
    from raftsched.dags.taskflow import unwrap  # a TaskFlow XComArg stands for its task

    other = unwrap(other)
    items = [other] if isinstance(other, Task) or hasattr(other, edge) else other
    try:
        listed = list(items)  # type: ignore[call-overload]
    except TypeError:
        listed = [other]
    tasks: list[Any] = []
    for item in listed:
        item = unwrap(item)
        tasks += getattr(item, edge)() if hasattr(item, edge) else [item]
    for task in tasks:
        if not isinstance(task, Task):
            raise DagDefinitionError(
                f"task {source.task_id!r} can only depend on tasks or lists of tasks,"
                f" got {type(task).__name__} {task!r}",
                dag_id=source.dag.dag_id,
                task_id=source.task_id,
            )
    return tasks


def declare_secrets(
    task: Task, secrets: Iterable[str] | None, connections: Iterable[str] | None
) -> str:
    """The task's declaration of the variables (``secrets=``) and connections it reads, as the
    value of its :data:`DECLARATION_ENV` env entry ("" when none)."""
    ids = {"dag_id": task.dag.dag_id, "task_id": task.task_id}
    names: dict[str, list[str]] = {}
    for what, given in (("secrets", secrets), ("connections", connections)):
        items = [given] if isinstance(given, str) else list(given or ())
        if not all(isinstance(n, str) for n in items):
            raise DagDefinitionError(
                f"{what} of task {task.task_id!r} must be a list of names, got"
                f" {v.short_repr(given)}",
                **ids,
            )
        names[what] = items
    try:
        text = encode_declaration(names["secrets"], names["connections"])
    except ValueError as err:
        raise DagDefinitionError(f"task {task.task_id!r}: {err}", **ids) from None
    if text and any(name == DECLARATION_ENV for name, _ in getattr(task, "env", ())):
        raise DagDefinitionError(
            f"task {task.task_id!r}: {DECLARATION_ENV} is reserved; declare with secrets= and"
            " connections=",
            **ids,
        )
    return text


class BashTask(Task):
    """Runs ``command`` with ``bash -c`` on a worker; ``env`` adds environment variables."""

    kind = "bash"
    mapped_stand_ins = {"command": "# mapped: each instance gets its own command"}
    mappable: tuple[str, ...] | None = ("command", "env")

    def __init__(
        self,
        task_id: str,
        *,
        command: str,
        env: dict[str, str] | None = None,
        secrets: Iterable[str] | None = None,
        connections: Iterable[str] | None = None,
        skip_on_exit_code: int | None = None,
        dag: DAG | None = None,
        retries: int | None = None,
        retry_delay: timedelta | None = None,
        retry_exponential_backoff: bool = False,
        max_retry_delay: timedelta | None = None,
        execution_timeout: timedelta | None = None,
        priority_weight: int = 1,
        trigger_rule: str | TriggerRule = "all_success",
        queue: str | None = None,
        **callbacks: Any,  # on_failure_callback, on_success_callback, on_retry_callback
    ) -> None:
        super().__init__(
            task_id,
            dag=dag,
            retries=retries,
            retry_delay=retry_delay,
            retry_exponential_backoff=retry_exponential_backoff,
            max_retry_delay=max_retry_delay,
            execution_timeout=execution_timeout,
            priority_weight=priority_weight,
            trigger_rule=trigger_rule,
            queue=queue,
            **callbacks,
        )
        ids = {"dag_id": self.dag.dag_id, "task_id": self.task_id}
        if not isinstance(command, str) or not command.strip():
            raise DagDefinitionError(
                f"command of BashTask {self.task_id!r} must be a non-empty string, got"
                f" {v.short_repr(command)}",
                **ids,
            )
        self.command = v.check_command(command, **ids)
        self.env = v.check_env(env, **ids)
        self.declared_secrets = declare_secrets(self, secrets, connections)
        # This exit code ends the attempt SKIPPED (Airflow's BashOperator says 99 by default;
        # here it is opt-in, so an existing DAG whose command exits 99 still fails).
        if skip_on_exit_code is not None:
            skip_on_exit_code = v.check_count(
                skip_on_exit_code,
                f"skip_on_exit_code of BashTask {self.task_id!r}",
                minimum=1,
                maximum=255,
                **ids,
            )
        self.skip_on_exit_code = skip_on_exit_code

    def _spec_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"command": self.command, "env": self.env}
        if self.skip_on_exit_code is not None:
            fields["skip_on_exit_code"] = self.skip_on_exit_code
        return fields


class PythonTask(Task):
    """Calls ``fn(**kwargs)`` on a worker. ``fn`` must be a module-level function of the DAG
    file (workers import the file and look it up by name); ``kwargs`` must be JSON-able."""

    kind = "python"

    def __init__(
        self,
        task_id: str,
        *,
        fn: Callable[..., Any],
        kwargs: dict[str, Any] | None = None,
        secrets: Iterable[str] | None = None,
        connections: Iterable[str] | None = None,
        dag: DAG | None = None,
        retries: int | None = None,
        retry_delay: timedelta | None = None,
        retry_exponential_backoff: bool = False,
        max_retry_delay: timedelta | None = None,
        execution_timeout: timedelta | None = None,
        priority_weight: int = 1,
        trigger_rule: str | TriggerRule = "all_success",
        queue: str | None = None,
        **callbacks: Any,  # on_failure_callback, on_success_callback, on_retry_callback
    ) -> None:
        super().__init__(
            task_id,
            dag=dag,
            retries=retries,
            retry_delay=retry_delay,
            retry_exponential_backoff=retry_exponential_backoff,
            max_retry_delay=max_retry_delay,
            execution_timeout=execution_timeout,
            priority_weight=priority_weight,
            trigger_rule=trigger_rule,
            queue=queue,
            **callbacks,
        )
        ids = {"dag_id": self.dag.dag_id, "task_id": self.task_id}
        self.fn = fn
        self.callable_name = v.check_callable(fn, **ids)
        self.kwargs_json = v.check_kwargs(kwargs, **ids)
        self.declared_secrets = declare_secrets(self, secrets, connections)

    def _spec_fields(self) -> dict[str, Any]:
        return {"callable_name": self.callable_name, "kwargs_json": self.kwargs_json}
