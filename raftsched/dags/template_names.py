"""The template names Airflow DAGs use beyond the base ones of :mod:`raftsched.dags.templating`:
``ti``/``task_instance`` (ids, ``try_number``, ``xcom_pull`` of the direct upstream tasks'
return values, which the lease carries), ``macros`` (``ds_add``, ``ds_format``,
``datetime``, ``timedelta``; not ``time``, whose ``sleep`` the render budget could not
interrupt), ``dag_run`` (``.conf``, ``.run_id``, ``.logical_date``...),
``ts_nodash_with_tz``, ``task_instance_key_str``, ``var`` (the variables the task declared:
:class:`Variables`), and the date convention a task's spec asks for.

The date convention: a task whose spec env holds ``MARKER=INTERVAL_START`` (raftsched.airflow
sets it on a DAG with a ``timedelta`` schedule, or a cron one with
``create_cron_data_intervals``) sees Airflow 2's logical date, the START of its run's data
interval, as ``logical_date``, ``ds``, ``ts`` and their variants, and ``next_ds`` (the end's).
Other tasks see the run's logical date as it is (its scheduled time, Airflow 3's meaning). It
travels in the spec, so the worker's rendering, the task page and the task's own context
(``raftsched.airflow``) agree on every node.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from raftsched import secrets
from raftsched.dags import template_connections

MARKER = "RAFTSCHED_LOGICAL_DATE_IS"
INTERVAL_START = "data_interval_start"


def ds_add(ds: str, days: int) -> str:
    """``ds_add("2024-01-05", -4)`` is ``"2024-01-01"`` (Airflow's macro)."""
    return (datetime.strptime(str(ds), "%Y-%m-%d") + timedelta(days=int(days))).strftime("%Y-%m-%d")


def ds_format(ds: str, input_format: str, output_format: str) -> str:
    """``ds_format("2024-01-05", "%Y-%m-%d", "%m/%d/%Y")`` is ``"01/05/2024"``."""
    return datetime.strptime(str(ds), input_format).strftime(output_format)


MACROS = SimpleNamespace(ds_add=ds_add, ds_format=ds_format, datetime=datetime, timedelta=timedelta)


def date_names(logical: datetime | None) -> dict[str, Any]:
    """``logical_date`` and the names derived from it (``ds``, ``ts``...)."""
    if logical is None:
        return {"ds": "", "ds_nodash": "", "ts": "", "ts_nodash": "", "ts_nodash_with_tz": ""}
    ds = logical.strftime("%Y-%m-%d")
    return {
        "logical_date": logical,
        "ds": ds,
        "ds_nodash": ds.replace("-", ""),
        "ts": logical.isoformat(),
        "ts_nodash": logical.strftime("%Y%m%dT%H%M%S"),
        "ts_nodash_with_tz": logical.isoformat().replace("-", "").replace(":", ""),
    }


MASKED = "***"


class Variables:
    """``var.value.NAME`` / ``var.json.NAME`` / ``var.value.get("NAME", default)``: the
    variables the task declared (``secrets=``; an Airflow task declares those its templates
    name), from the attempt's ``RAFTSCHED_VAR_*`` values. ``values`` None (the task page):
    a declared name shows as ``***``, never its value."""

    def __init__(
        self, values: Mapping[str, str] | None, declared: Iterable[str], *, as_json: bool
    ) -> None:
        self.values = values
        self.declared = frozenset(declared)
        self.as_json = as_json

    def get(self, name: str, default: Any = None) -> Any:
        if self.values is None:
            return MASKED if name in self.declared else default
        if name not in self.values:
            return default
        text = self.values[name]
        return json.loads(text) if self.as_json else text

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        missing = object()
        value = self.get(name, missing)
        if value is missing:
            raise KeyError(
                f"variable {name!r} is not declared by this task (declare it: secrets=[...],"
                " or name it in a template of an Airflow task)"
            )
        return value


def variables(
    task_env: Iterable[tuple[str, str]] | Mapping[str, str],
    secret_env: Iterable[tuple[str, str]] | None,
) -> SimpleNamespace:
    """``var`` for a template or a context (``secret_env`` None: the task page)."""
    pairs = task_env.items() if isinstance(task_env, Mapping) else task_env
    names = secrets.declared(list(pairs))[0]
    values = None
    if secret_env is not None:
        prefix = secrets.VAR_ENV_PREFIX
        values = {k[len(prefix) :]: v for k, v in secret_env if k.startswith(prefix)}
    return SimpleNamespace(
        value=Variables(values, names, as_json=False), json=Variables(values, names, as_json=True)
    )


RETURN_VALUE = "return_value"


class PendingValue:
    """What the task page renders for an upstream return value it does not know: its name,
    and so for an item of it (``['key']``) or an attribute."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __getitem__(self, item: Any) -> PendingValue:
        return PendingValue(f"{self.text}[{item!r}]")

    def __getattr__(self, name: str) -> PendingValue:
        if name.startswith("_"):
            raise AttributeError(name)
        return PendingValue(f"{self.text}.{name}")

    def __str__(self) -> str:
        return f"({self.text})"


def xcom_pull(
    upstream: Mapping[str, Any] | None,
    task_id: str,
    task_ids: str | list[str] | None,
    key: str = RETURN_VALUE,
) -> Any:
    """Airflow's ``ti.xcom_pull``: the return value of ``task_ids`` (a direct upstream task of
    ``task_id``; a list: each one's), or one key of a dict value (a ``multiple_outputs``
    key). ``upstream`` (parsed values by task id) None: the task page, which names them."""
    if task_ids is None:
        raise KeyError("xcom_pull needs task_ids=: the id of a direct upstream task")
    if not isinstance(task_ids, str):
        return [xcom_pull(upstream, task_id, one, key) for one in task_ids]
    if upstream is None:
        return PendingValue(f"the return value of {task_ids}")
    if task_ids not in upstream:
        raise KeyError(
            f"xcom_pull(task_ids={task_ids!r}): only the return values of a task's direct"
            f" upstream tasks reach it in raftsched; make {task_ids!r} upstream of"
            f" {task_id!r}, or pass its output as an argument"
        )
    value = upstream[task_ids]
    if key == RETURN_VALUE:
        return value
    return value.get(key) if isinstance(value, dict) else None


def interval_start_convention(task_env: Iterable[tuple[str, str]] | Mapping[str, str]) -> bool:
    env = task_env if isinstance(task_env, Mapping) else dict(task_env)
    return env.get(MARKER) == INTERVAL_START


@dataclass(frozen=True)
class TemplateTaskInstance:
    """``ti`` / ``task_instance`` in a template. A plain class, not a closure: the context
    is pickled to the render helper process (``render_limits``)."""

    dag_id: Any
    task_id: Any
    run_id: Any
    try_number: Any
    upstream: dict[str, Any] | None
    map_index: int = -1

    def xcom_pull(
        self, task_ids: str | list[str] | None = None, key: str = RETURN_VALUE, **_: Any
    ) -> Any:
        return xcom_pull(self.upstream, str(self.task_id), task_ids, key)


def extend(
    context: dict[str, Any],
    task_env: Iterable[tuple[str, str]] | Mapping[str, str] = (),
    secret_env: Iterable[tuple[str, str]] | None = None,
    upstream_results: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``context`` (templating.template_context's names) with the Airflow names added, and
    its dates in the convention ``task_env`` asks for. ``secret_env``: the attempt's
    declared values (``var``); ``upstream_results``: its direct upstream tasks' return
    values (JSON text, ``ti.xcom_pull``); None where there are none to show (the task page)."""
    context["var"] = variables(task_env, secret_env)
    context["conn"] = template_connections.connections(task_env, secret_env)  # {{ conn.ID.host }}
    if interval_start_convention(task_env) and context.get("data_interval_start") is not None:
        context.update(date_names(context["data_interval_start"]))
        end = context.get("data_interval_end")
        if end is not None:
            context["next_ds"] = end.strftime("%Y-%m-%d")
            context["next_ds_nodash"] = context["next_ds"].replace("-", "")
    else:
        context.setdefault(
            "ts_nodash_with_tz", date_names(context.get("logical_date"))["ts_nodash_with_tz"]
        )
    context["macros"] = MACROS
    context["task_instance_key_str"] = (
        f"{context.get('dag_id')}__{context.get('task_id')}__{context.get('ds_nodash')}"
    )
    upstream = None
    if upstream_results is not None:
        upstream = {k: json.loads(v) if v else None for k, v in upstream_results.items()}
    context["ti"] = context["task_instance"] = TemplateTaskInstance(
        dag_id=context.get("dag_id"),
        task_id=context.get("task_id"),
        run_id=context.get("run_id"),
        try_number=context.get("try_number"),
        upstream=upstream,
    )
    context["dag_run"] = SimpleNamespace(
        dag_id=context.get("dag_id"),
        run_id=context.get("run_id"),
        conf=context.get("conf"),
        logical_date=context.get("logical_date"),
        data_interval_start=context.get("data_interval_start"),
        data_interval_end=context.get("data_interval_end"),
    )
    return context


__all__ = ["INTERVAL_START", "MACROS", "MARKER", "date_names", "ds_add", "ds_format", "extend"]
