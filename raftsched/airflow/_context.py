"""Airflow's task context, built inside the task process: what a callable declaring
``**context``, ``ti``, ``params``, ``logical_date``... receives, and ``get_current_context()``.

Everything comes from what the worker already gives every attempt (the ``RAFTSCHED_*``
variables: ids, try number, dates, conf) and from the DAG file the process imported (the task
and DAG objects, the params' defaults and schemas); nothing is fetched from the cluster. The
dates follow the convention the task's spec asks for (:mod:`raftsched.dags.template_names`).
Datetimes are pendulum's when pendulum is installed (Airflow's type), else aware datetimes.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
from collections.abc import Iterator, Mapping
from datetime import datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from raftsched.core import mapping
from raftsched.dags import template_names
from raftsched.dags.assets import (
    ASSET_EVENTS_ENV,
    Asset,
    new_outlet_events,
    triggering_events,
)
from raftsched.dags.params import effective_params
from raftsched.secrets import VAR_ENV_PREFIX

if TYPE_CHECKING:
    from raftsched.dags.tasks import Task

_current: list[dict[str, Any]] = []  # the contexts of the calls running in this process


def _date(text: str | None) -> datetime | None:
    if not text:
        return None
    value = datetime.fromisoformat(text)
    try:
        import pendulum
    except ImportError:  # pragma: no cover - the airflow extra installs it
        return value
    return pendulum.instance(value)


# The kwargs entry of an Airflow Python task holding its direct upstream tasks' return values
UPSTREAM_KEY = "__airflow_upstream__"
RETURN_VALUE = template_names.RETURN_VALUE


class TaskInstance:
    """What ``ti`` / ``task_instance`` offers here: the attempt's identity, and
    ``xcom_pull`` of its direct upstream tasks' return values (they come with its lease).
    There is no ``xcom_push``: a task's XCom is what it returns."""

    def __init__(
        self,
        context: Mapping[str, Any],
        task: Task | None,
        upstream: Mapping[str, Any] | None = None,
    ) -> None:
        self.upstream = dict(upstream or {})
        self.dag_id = context["dag_id"]
        self.task_id = context["task_id"]
        self.run_id = context["run_id"]
        self.try_number = context["try_number"]
        self.map_index = context.get("map_index", -1)
        self.task = task
        self.logical_date = context.get("logical_date")
        self.state = "running"

    def xcom_pull(
        self, task_ids: str | list[str] | None = None, key: str = RETURN_VALUE, **_: Any
    ) -> Any:
        """The return value of ``task_ids`` (a direct upstream task; a list: each one's), or
        one key of it (Airflow's ``multiple_outputs`` keys)."""
        return template_names.xcom_pull(self.upstream, self.task_id, task_ids, key)

    def xcom_push(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "ti.xcom_push is not supported by raftsched: return the value from the task"
        )

    def __repr__(self) -> str:
        return f"<TaskInstance {self.dag_id}.{self.task_id} {self.run_id} try {self.try_number}>"


def build(
    task: Task | None,
    environ: Mapping[str, str] | None = None,
    upstream: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The context of the attempt this process runs (from its ``RAFTSCHED_*`` variables;
    ``upstream``: its direct upstream tasks' return values)."""
    env = os.environ if environ is None else environ
    conf = json.loads(env.get("RAFTSCHED_CONF") or "{}")
    dag = getattr(task, "dag", None)
    params_json = getattr(dag, "params_json", "") or ""
    context: dict[str, Any] = {
        "dag_id": env.get("RAFTSCHED_DAG_ID", ""),
        "run_id": env.get("RAFTSCHED_RUN_ID", ""),
        # a mapped instance's id is "task_id[i]": Airflow's ti has the task's id and map_index
        "task_id": mapping.task_of(env.get("RAFTSCHED_TASK_ID", "")),
        "map_index": int(env.get(mapping.MAP_INDEX_ENV) or -1),
        "try_number": int(env.get("RAFTSCHED_TRY_NUMBER") or 1),
        "logical_date": _date(env.get("RAFTSCHED_LOGICAL_DATE")),
        "data_interval_start": _date(env.get("RAFTSCHED_DATA_INTERVAL_START")),
        "data_interval_end": _date(env.get("RAFTSCHED_DATA_INTERVAL_END")),
        "conf": conf,
        "params": effective_params(params_json, conf),
        # The lease's token, to fence the task's own writes (docs/fencing-side-effects.md)
        "fencing_token": int(env.get("RAFTSCHED_FENCING_TOKEN") or 0) or None,
    }
    context.update(template_names.date_names(context["logical_date"]))
    values = [(k, v) for k, v in env.items() if k.startswith(VAR_ENV_PREFIX)]
    context = template_names.extend(context, env, values)
    context["dag_run"] = SimpleNamespace(**vars(context["dag_run"]), run_type=_run_type(context))
    context["ti"] = context["task_instance"] = TaskInstance(context, task, upstream)
    context["task"] = task
    context["dag"] = dag
    context["run_after"] = context["data_interval_end"]
    # assets (raftsched.dags.assets): the run's triggering events, the task's inlets/outlets
    events = triggering_events(env.get(ASSET_EVENTS_ENV, ""))
    context["triggering_asset_events"] = context["triggering_dataset_events"] = events
    context["inlets"] = [Asset(uri) for uri in getattr(task, "inlets", ())]
    context["outlets"] = [Asset(uri) for uri in getattr(task, "outlets", ())]
    # outlet_events[asset].extra = {...}: the extra of the event a success emits of it
    context["outlet_events"] = new_outlet_events(getattr(task, "outlets", ()))
    return context


_REASONS = {"failure": "task_failure", "success": "success", "deadline": "deadline_missed"}


def mark_callbacks(value: Any) -> Any:
    """Mark the functions of a callback option (one, or a list) to get
    :func:`callback_context`; notifiers are left as they are."""
    for item in value if isinstance(value, list | tuple) else [value]:
        if inspect.isfunction(item):
            item.raftsched_airflow_context = True  # type: ignore[attr-defined]
    return value


def callback_context(plain: Mapping[str, Any]) -> dict[str, Any]:
    """A callback's context (core/callbacks.py: a dict of JSON values) with Airflow's keys
    added: ``task_instance``/``ti``, ``dag_run``, ``reason``, ``exception`` (an exception
    whose message is the failure's, where Airflow passes the exception raised)."""
    from raftsched.airflow.exceptions import AirflowException

    context = dict(plain)
    for key in ("logical_date", "data_interval_start", "data_interval_end"):
        context[key] = _date(plain.get(key) or None)
    text = plain.get("exception") or plain.get("message")
    context["exception"] = AirflowException(text) if text else None
    context["reason"] = _REASONS.get(str(plain.get("event")), plain.get("event"))
    context["dag_run"] = SimpleNamespace(
        dag_id=plain.get("dag_id"),
        run_id=plain.get("run_id"),
        conf=plain.get("conf") or {},
        run_type=plain.get("run_type"),
        logical_date=context["logical_date"],
        data_interval_start=context["data_interval_start"],
        data_interval_end=context["data_interval_end"],
    )
    if plain.get("task_id"):
        ti = TaskInstance({**context, "try_number": plain.get("try_number") or 1}, None)
        ti.state = plain.get("state")
        context["ti"] = context["task_instance"] = ti
    context.update(template_names.date_names(context["logical_date"]))
    return context


def _run_type(context: Mapping[str, Any]) -> str:
    run_id = str(context.get("run_id") or "")
    return run_id.split("__", 1)[0] if "__" in run_id else "manual"


@contextlib.contextmanager
def current(context: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``context`` is what ``get_current_context()`` returns inside the block."""
    _current.append(context)
    try:
        yield context
    finally:
        _current.remove(context)


def get_current_context() -> dict[str, Any]:
    """The running task's context (Airflow's ``get_current_context``)."""
    if not _current:
        raise RuntimeError(
            "Current context was requested but no context was found: call"
            " get_current_context() inside a running task"
        )
    return _current[-1]


__all__ = [
    "UPSTREAM_KEY",
    "TaskInstance",
    "build",
    "callback_context",
    "current",
    "get_current_context",
    "mark_callbacks",
]
