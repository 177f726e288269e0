"""The authoring API of DAG files: ``DAG``, ``BashTask``, ``PythonTask`` and ``>>``/``<<``.

    from datetime import datetime
    from raftsched import DAG, BashTask

    with DAG("etl", schedule="*/5 * * * *", start_date=datetime(2024, 1, 1)):
        extract = BashTask("extract", command="echo extract")
        load = BashTask("load", command="echo load")
        extract >> load

Mistakes raise ``DagDefinitionError`` as early as they can be seen: a bad id, cron, zone or
option when the object is built; cycles when ``to_spec()`` sees the whole graph. A naive
start_date or end_date is wall-clock time in the DAG's time zone. Every value is bounded as
``raftsched.core.limits`` says (sizes, counts, ranges, dates); ``to_spec()`` checks the whole
spec once more (``validation.check_spec``), so a spec the cluster would refuse never leaves the
parser.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from raftsched.core import limits
from raftsched.core.model import DagSpec, TaskSpec, TriggerRule
from raftsched.dags import validation as v
from raftsched.errors import DagDefinitionError
from raftsched.secrets import DECLARATION_ENV, encode_declaration

_context: list[DAG] = []  # the DAGs of enclosing `with DAG(...)` blocks, innermost last
_collector: list[DAG] | None = None  # set by collect_dags() while a DAG file is imported
# catchup of a DAG that does not pass it: [scheduler] catchup_by_default, which the parser
# hands to its child process (set_catchup_default)
_catchup_default = False


def set_catchup_default(value: bool) -> None:
    """What ``DAG(catchup=...)`` means when a DAG file leaves it out."""
    global _catchup_default
    _catchup_default = bool(value)


@contextmanager
def collect_dags() -> Iterator[list[DAG]]:
    """Record every DAG constructed inside the block (the parser's child uses this)."""
    global _collector
    previous, _collector = _collector, []
    try:
        yield _collector
    finally:
        _collector = previous


class DAG:
    def __init__(
        self,
        dag_id: str,
        *,
        schedule: str | timedelta | None,
        start_date: datetime | None = None,
        end_date: datetime | None = None,
        timezone: str = "UTC",
        catchup: bool | None = None,  # None: [scheduler] catchup_by_default
        max_active_runs: int = 16,
        max_active_tasks: int = 16,
        default_retries: int = 0,
        default_retry_delay: timedelta = timedelta(minutes=5),
        tags: Iterable[str] | None = None,
        description: str = "",
    ) -> None:
        self.dag_id = v.check_id("dag_id", dag_id)
        self.schedule = v.parse_schedule(schedule, dag_id=dag_id)
        zone = v.check_zone(timezone, dag_id=dag_id)
        self.timezone = zone.key
        self.start_date = v.to_utc(start_date, zone, what="start_date", dag_id=dag_id)
        self.end_date = v.to_utc(end_date, zone, what="end_date", dag_id=dag_id)
        if self.start_date and self.end_date and self.end_date < self.start_date:
            raise DagDefinitionError(
                f"end_date {self.end_date.isoformat()} of DAG {dag_id!r} is before its"
                f" start_date {self.start_date.isoformat()}",
                dag_id=dag_id,
            )
        kind = self.schedule.kind.value
        if kind in ("interval", "once") and self.start_date is None:
            raise DagDefinitionError(
                f"DAG {dag_id!r} with schedule {self.schedule.display} needs a start_date",
                dag_id=dag_id,
            )
        self.catchup = _catchup_default if catchup is None else bool(catchup)
        self.max_active_runs = v.check_count(
            max_active_runs,
            f"max_active_runs of DAG {dag_id!r}",
            minimum=1,
            maximum=limits.MAX_ACTIVE,
            dag_id=dag_id,
        )
        self.max_active_tasks = v.check_count(
            max_active_tasks,
            f"max_active_tasks of DAG {dag_id!r}",
            minimum=1,
            maximum=limits.MAX_ACTIVE,
            dag_id=dag_id,
        )
        self.default_retries = v.check_count(
            default_retries,
            f"default_retries of DAG {dag_id!r}",
            minimum=0,
            maximum=limits.MAX_RETRIES,
            dag_id=dag_id,
        )
        self.default_retry_delay = v.check_duration(
            default_retry_delay, f"default_retry_delay of DAG {dag_id!r}", dag_id=dag_id
        )
        self.tags = v.check_tags(tags, dag_id=dag_id)
        self.description = v.check_description(description, dag_id=dag_id)
        self.tasks: dict[str, Task] = {}
        self.fileloc = sys._getframe(1).f_code.co_filename
        if _collector is not None:
            _collector.append(self)

    def __enter__(self) -> DAG:
        _context.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _context.remove(self)

    def __repr__(self) -> str:
        return f"<DAG {self.dag_id}>"

    def add_task(self, task: Task) -> None:
        if task.task_id in self.tasks:
            raise DagDefinitionError(
                f"duplicate task_id {task.task_id!r} in DAG {self.dag_id!r}",
                dag_id=self.dag_id,
                task_id=task.task_id,
            )
        if len(self.tasks) >= limits.MAX_TASKS_PER_DAG:
            raise DagDefinitionError(
                f"DAG {self.dag_id!r} has more than {limits.MAX_TASKS_PER_DAG} tasks; split it",
                dag_id=self.dag_id,
                task_id=task.task_id,
            )
        self.tasks[task.task_id] = task

    def to_spec(self, fileloc: str | None = None) -> DagSpec:
        """The DAG as a validated, hashed ``DagSpec`` (raises DagDefinitionError on a cycle)."""
        cycle = v.find_cycle({tid: set(t.upstream) for tid, t in self.tasks.items()})
        if cycle:
            raise DagDefinitionError(
                f"cycle in DAG {self.dag_id!r}: {' -> '.join(cycle)}",
                dag_id=self.dag_id,
                task_id=cycle[0],
            )
        spec = DagSpec(
            dag_id=self.dag_id,
            fileloc=fileloc if fileloc is not None else self.fileloc,
            schedule=self.schedule,
            timezone=self.timezone,
            start_date=self.start_date,
            end_date=self.end_date,
            catchup=self.catchup,
            max_active_runs=self.max_active_runs,
            max_active_tasks=self.max_active_tasks,
            tags=self.tags,
            description=self.description,
            tasks=tuple(self.tasks[tid].to_spec() for tid in sorted(self.tasks)),
        )
        return _with_hash(v.check_spec(spec))


def _with_hash(spec: DagSpec) -> DagSpec:
    return replace(spec, spec_hash=spec.compute_hash())


class Task:
    """What BashTask and PythonTask share: options, DAG membership, dependencies."""

    kind = ""

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
    ) -> None:
        dag = dag if dag is not None else (_context[-1] if _context else None)
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
        self.upstream: set[str] = set()
        dag.add_task(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.dag.dag_id}.{self.task_id}>"

    # -- dependencies ------------------------------------------------------------------------
    def set_downstream(self, other: Task | Iterable[Task]) -> None:
        for task in _tasks(other, self):
            if task.dag is not self.dag:
                raise DagDefinitionError(
                    f"cannot link task {self.task_id!r} of DAG {self.dag.dag_id!r} to task"
                    f" {task.task_id!r} of DAG {task.dag.dag_id!r}: tasks must share a DAG",
                    dag_id=self.dag.dag_id,
                    task_id=self.task_id,
                )
            task.upstream.add(self.task_id)

    def set_upstream(self, other: Task | Iterable[Task]) -> None:
        for task in _tasks(other, self):
            task.set_downstream(self)

    def __rshift__(self, other: Any) -> Any:  # self >> other
        self.set_downstream(other)
        return other

    def __lshift__(self, other: Any) -> Any:  # self << other
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
            **self._spec_fields(),
        )


def _tasks(other: object, source: Task) -> list[Task]:
    items = [other] if isinstance(other, Task) else other
    try:
        tasks = list(items)  # type: ignore[call-overload]
    except TypeError:
        tasks = [other]
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

    def __init__(
        self,
        task_id: str,
        *,
        command: str,
        env: dict[str, str] | None = None,
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

    def _spec_fields(self) -> dict[str, Any]:
        return {"command": self.command, "env": self.env}


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
        )
        ids = {"dag_id": self.dag.dag_id, "task_id": self.task_id}
        self.fn = fn
        self.callable_name = v.check_callable(fn, **ids)
        self.kwargs_json = v.check_kwargs(kwargs, **ids)
        self.declared_secrets = declare_secrets(self, secrets, connections)

    def _spec_fields(self) -> dict[str, Any]:
        return {"callable_name": self.callable_name, "kwargs_json": self.kwargs_json}
