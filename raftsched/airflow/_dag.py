"""Airflow's ``DAG`` and ``@dag`` on top of :class:`raftsched.dags.dag.DAG`.

What changes on the way in (docs/migrating-from-airflow.md says it for users):

- ``dag_id`` may be positional or a keyword; ``schedule_interval`` (Airflow 2) is ``schedule``;
  a ``start_date`` with a zone (pendulum, ZoneInfo) gives the DAG its ``timezone``.
- ``default_args`` holds any task argument: the DAG keeps them all
  (:attr:`DAG.airflow_default_args`) and each task of this layer takes them
  (``_operators.task_options``); ``start_date``/``end_date`` there are the DAG's.
- Dates: a ``timedelta`` schedule, and a cron one with ``create_cron_data_intervals=True``
  (default: ``[scheduler] create_cron_data_intervals``), mean Airflow 2's logical date, the
  START of the data interval. The cluster still names a run by its scheduled time (the end);
  the tasks see the start as ``logical_date``/``ds``/``ts`` (``dags.template_names``). The
  start_date moves one period on, so the first run is the one whose interval starts at the
  first time at or after start_date, as in Airflow.
- A ``@dag`` function takes no arguments (Airflow's DAG-level params from its signature are
  refused: ``@dag(params=...)`` says the same thing).
- A Python task gets its direct upstream tasks' return values for ``ti.xcom_pull``
  (:meth:`DAG._task_spec`).
- Options for the UI only are accepted and dropped; ones that would change behaviour and that
  raftsched lacks raise DagDefinitionError naming what to do instead.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from raftsched.airflow._callables import AirflowCallable
from raftsched.airflow._context import UPSTREAM_KEY, mark_callbacks
from raftsched.airflow._unsupported import refuse
from raftsched.core.timetable import from_schedule
from raftsched.dags import dag as native
from raftsched.dags import template_names
from raftsched.dags.task_checks import check_kwargs
from raftsched.dags.taskflow import registered_callable
from raftsched.dags.xcom_args import placeholder
from raftsched.errors import DagDefinitionError

# Airflow DAG options that only describe the DAG (UI, docs, registration): dropped
_DESCRIPTIVE = frozenset(
    {
        "doc_md",
        "owner_links",
        "access_control",
        "dag_display_name",
        "default_view",
        "orientation",
        "auto_register",
        "is_paused_upon_creation",
        "fileloc",
        "jinja_environment_kwargs",
    }
)
_REFUSED = {
    "timetable": "use schedule= with a cron string, a timedelta or a preset",
    "sla_miss_callback": "use DAG(deadline=timedelta(...), on_deadline_callback=...)",
    "user_defined_macros": "compute the value in the task, or pass it in params",
    "user_defined_filters": "compute the value in the task, or pass it in params",
    "fail_stop": "not supported yet: a failed task does not stop the others",
    "max_consecutive_failed_dag_runs": "not supported yet",
    "concurrency": "use max_active_tasks",
}
# default_args keys the DAG itself takes
_DAG_DEFAULTS = ("start_date", "end_date")

# [scheduler] create_cron_data_intervals, which the parser hands to its child process
_create_cron_data_intervals = False


def set_create_cron_data_intervals(value: bool) -> None:
    global _create_cron_data_intervals
    _create_cron_data_intervals = bool(value)


def _zone_of(start_date: object) -> str | None:
    """The IANA name of an aware start_date's zone (pendulum's or ZoneInfo), else None."""
    tz = getattr(start_date, "tzinfo", None)
    if tz is None:
        return None
    key = getattr(tz, "key", None) or getattr(tz, "name", None)
    if (isinstance(key, str) and "/" in key) or key == "UTC":
        return key
    if isinstance(start_date, datetime) and start_date.utcoffset() == timedelta(0):
        return "UTC"
    return None  # a fixed offset: the date is converted to UTC as it is


class DAG(native.DAG):
    """``DAG(dag_id, schedule=..., start_date=..., default_args=..., ...)`` as Airflow's."""

    def __init__(self, dag_id: str | None = None, *args: Any, **kwargs: Any) -> None:
        if args:
            kwargs.setdefault("description", args[0])
        if dag_id is None:
            dag_id = kwargs.pop("dag_id", None)
        if not isinstance(dag_id, str):
            raise DagDefinitionError(f"DAG needs a dag_id string, got {dag_id!r}")
        self.doc_md = kwargs.get("doc_md")
        for name in _DESCRIPTIVE:
            kwargs.pop(name, None)
        for name, hint in _REFUSED.items():
            if kwargs.get(name) is not None:
                refuse(f"DAG({name}=...)", hint, dag_id=dag_id)
        if "schedule_interval" in kwargs:  # Airflow 2's name
            kwargs.setdefault("schedule", kwargs.pop("schedule_interval"))
        schedule = kwargs.pop("schedule", None)
        default_args = dict(kwargs.pop("default_args", None) or {})
        for key in _DAG_DEFAULTS:
            if key in default_args and kwargs.get(key) is None:
                kwargs[key] = default_args[key]
        self.airflow_default_args = default_args
        # name -> value or Param: the full JSON Schemas, checked when a Python task starts
        self.airflow_params = dict(kwargs.get("params") or {})
        self.template_searchpath = _searchpath(kwargs.pop("template_searchpath", None))
        self.render_template_as_native_obj = bool(
            kwargs.pop("render_template_as_native_obj", False)
        )
        cron_intervals = kwargs.pop("create_cron_data_intervals", None)
        if cron_intervals is None:
            cron_intervals = _create_cron_data_intervals
        if kwargs.get("timezone") is None:
            kwargs["timezone"] = _zone_of(kwargs.get("start_date")) or "UTC"
        for name in ("on_failure_callback", "on_success_callback"):
            mark_callbacks(kwargs.get(name))
        for name in native.TASK_CALLBACKS:
            mark_callbacks(default_args.get(name))
        native_defaults = {
            k: v
            for k, v in default_args.items()
            if k in ("queue", "retries", "retry_delay", *native.TASK_CALLBACKS)
        }
        super().__init__(dag_id, schedule=schedule, default_args=native_defaults, **kwargs)
        self.fileloc = sys._getframe(1).f_code.co_filename  # the DAG file, not this module
        kind = self.schedule.kind.value
        self.logical_date_is_interval_start = kind == "interval" or (
            kind == "cron" and bool(cron_intervals)
        )
        if self.logical_date_is_interval_start:
            self.task_env_extra[template_names.MARKER] = template_names.INTERVAL_START
            self._start_one_period_on()

    def _task_spec(self, task: Any) -> Any:
        """A Python task of this layer also gets its direct upstream tasks' return values,
        as XCom placeholders under :data:`UPSTREAM_KEY`: the worker fills them from the
        lease, and ``ti.xcom_pull(task_ids=...)`` reads them (``_context``)."""
        spec = super()._task_spec(task)
        upstream = sorted(task.upstream)
        ours = isinstance(registered_callable(spec.callable_name or ""), AirflowCallable)
        if spec.kind != "python" or not upstream or not ours:
            return spec  # a native task's function would not expect the extra argument
        kwargs = json.loads(spec.kwargs_json or "{}")
        kwargs[UPSTREAM_KEY] = {up: placeholder(up) for up in upstream}
        ids = {"dag_id": self.dag_id, "task_id": task.task_id}
        return replace(spec, kwargs_json=check_kwargs(kwargs, **ids))

    def _start_one_period_on(self) -> None:
        """Airflow's first data interval starts at the first fire time at or after start_date
        and runs when it ends: here that run's scheduled time is the second fire time."""
        if self.start_date is None:
            return
        table = from_schedule(self.schedule, self.timezone, self.start_date, None)
        first = table.next_time(None)
        second = table.next_time(first) if first is not None else None
        if second is not None:
            self.start_date = second.astimezone(UTC)


def _searchpath(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str | os.PathLike) else list(value)  # type: ignore[call-overload]
    return tuple(os.fspath(item) for item in items)


class DagFactory:
    """A ``@dag`` function: calling it builds the DAG with its body inside ``with DAG``.
    It takes no arguments here (see the module docstring)."""

    def __init__(self, function: Callable[..., Any], options: Mapping[str, Any]) -> None:
        self.function = function
        self.options = dict(options)
        self.__wrapped__ = function
        self.__name__ = function.__name__
        self.__doc__ = function.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> DAG:
        options = dict(self.options)
        dag_id = options.pop("dag_id", None) or self.function.__name__
        if args or kwargs or inspect.signature(self.function).parameters:
            # Airflow turns them into params whose value each run resolves; passing the
            # defaults instead would ignore a trigger's conf without a word
            refuse(
                f"arguments of the @dag function {dag_id!r}",
                "declare them as @dag(params={...}) and read params['name'] in the task",
                dag_id=str(dag_id),
            )
        built = DAG(dag_id, **options)
        built.fileloc = self.function.__code__.co_filename
        if built.doc_md is None and self.function.__doc__:
            built.doc_md = self.function.__doc__
        with built:
            self.function()
        return built


def dag(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@dag`` / ``@dag(schedule=..., start_date=..., ...)``: Airflow's TaskFlow DAG."""

    def wrap(fn: Callable[..., Any]) -> DagFactory:
        return DagFactory(fn, options)

    return wrap(function) if function is not None else wrap


__all__ = ["DAG", "DagFactory", "dag", "set_create_cron_data_intervals"]
