"""Checks on a task's own options: trigger rule, pool, env, command, callable and kwargs.

Used by the constructors of ``BashTask`` and ``PythonTask`` (:mod:`raftsched.dags.tasks`) and
by :func:`raftsched.dags.validation.check_spec` on a whole spec; ``validation`` re-exports
every name here. Each raises DagDefinitionError naming the value and what is allowed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from raftsched.core import limits
from raftsched.core.limits import MAX_CALLABLE_CHARS, MAX_ENV_NAME_CHARS
from raftsched.core.model import TriggerRule
from raftsched.core.pool_table import DEFAULT_POOL, MAX_POOL_SLOTS
from raftsched.core.xcom import TASKFLOW_PREFIX
from raftsched.dags.value_checks import ID_PATTERN, bounded, short_repr
from raftsched.errors import DagDefinitionError

TRIGGER_RULES = tuple(rule.value for rule in TriggerRule)
MAX_KWARGS_DEPTH = limits.MAX_CONF_DEPTH


def check_trigger_rule(value: object, *, dag_id: str, task_id: str) -> TriggerRule:
    try:
        return TriggerRule(value)
    except ValueError:
        raise DagDefinitionError(
            f"unknown trigger_rule {value!r} for task {task_id!r} in DAG {dag_id!r};"
            f" allowed: {', '.join(TRIGGER_RULES)}",
            dag_id=dag_id,
            task_id=task_id,
        ) from None


def check_pool(value: object, *, dag_id: str, task_id: str) -> str:
    """A task's ``pool=``: a pool name as a queue's ("" for None and ``default_pool``, so a
    spec that names the default pool keeps its hash). Whether the pool exists is the
    cluster's business: a task of an unknown pool waits, queued, until it is created."""
    if value is None or value == DEFAULT_POOL:
        return ""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise DagDefinitionError(
            f"invalid pool {short_repr(value)} of task {task_id!r} in DAG {dag_id!r}: use 1 to"
            " 250 letters, digits, '_', '.' and '-'",
            dag_id=dag_id,
            task_id=task_id,
        )
    return value


def check_pool_slots(value: object, *, dag_id: str, task_id: str) -> int:
    """A task's ``pool_slots=``: how many slots of its pool one attempt takes (1 or more)."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_POOL_SLOTS:
        raise DagDefinitionError(
            f"pool_slots of task {task_id!r} in DAG {dag_id!r} must be an integer from 1 to"
            f" {MAX_POOL_SLOTS:,}, got {short_repr(value)}",
            dag_id=dag_id,
            task_id=task_id,
        )
    return value


def check_queue(value: object, *, dag_id: str, task_id: str = "") -> str:
    """A task's ``queue=`` (or a DAG's default): an id's characters and length."""
    where = f"task {task_id!r}" if task_id else "default_queue"
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise DagDefinitionError(
            f"invalid queue {short_repr(value)} of {where} in DAG {dag_id!r}: use 1 to 250"
            " letters, digits, '_', '.' and '-'",
            dag_id=dag_id,
            task_id=task_id,
        )
    return value


def check_env(env: object, *, dag_id: str, task_id: str) -> tuple[tuple[str, str], ...]:
    if env is None:
        return ()
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise DagDefinitionError(
            f"env of task {task_id!r} must be a dict of str to str, got {short_repr(env)}",
            dag_id=dag_id,
            task_id=task_id,
        )
    pairs = tuple(sorted(env.items()))
    check_env_pairs(pairs, dag_id=dag_id, task_id=task_id)
    return pairs


def check_env_pairs(pairs: tuple[tuple[str, str], ...], *, dag_id: str, task_id: str) -> None:
    where = f"env of task {task_id!r} in DAG {dag_id!r}"
    ids = {"dag_id": dag_id, "task_id": task_id}
    bounded(limits.check_count, "env", len(pairs), limits.MAX_ENV_VARS, where=where, **ids)
    for name, value in pairs:
        bounded(limits.check_text, "name", name, MAX_ENV_NAME_CHARS, where=where, **ids)
        if not name or "=" in name:
            raise DagDefinitionError(
                f"{where}: variable name {name[:60]!r} must be non-empty and hold no '='", **ids
            )
        bounded(
            limits.check_text, f"{name[:60]}", value, limits.MAX_ENV_VALUE_CHARS, where=where, **ids
        )


def check_command(command: str, *, dag_id: str, task_id: str) -> str:
    return bounded(
        limits.check_text,
        "command",
        command,
        limits.MAX_COMMAND_CHARS,
        where=f"BashTask {task_id!r} in DAG {dag_id!r}",
        dag_id=dag_id,
        task_id=task_id,
    )


def check_callable(fn: object, *, dag_id: str, task_id: str) -> str:
    """The ``__qualname__`` of a module-level function; rejects lambdas and nested functions."""
    if not callable(fn) or not hasattr(fn, "__qualname__"):
        raise DagDefinitionError(
            f"fn of PythonTask {task_id!r} must be a function, got {type(fn).__name__}",
            dag_id=dag_id,
            task_id=task_id,
        )
    qualname: str = fn.__qualname__
    bounded(
        limits.check_text,
        "fn",
        qualname,
        MAX_CALLABLE_CHARS,
        where=f"PythonTask {task_id!r}",
        dag_id=dag_id,
        task_id=task_id,
    )
    if "<lambda>" in qualname or "<locals>" in qualname:
        kind = "a lambda" if "<lambda>" in qualname else "a nested function"
        raise DagDefinitionError(
            f"fn of PythonTask {task_id!r} is {kind} ({qualname}); workers import the DAG file"
            " and look the function up by name, so define it with `def` at module level",
            dag_id=dag_id,
            task_id=task_id,
        )
    return qualname


def resolve_callable(namespace: Mapping[str, Any], qualname: str) -> Callable[..., Any] | None:
    """Look ``qualname`` ("fn" or "Class.fn") up in a module's namespace; None if absent.
    A TaskFlow task's name (``@taskflow:DAG:TASK``) is looked up among the tasks the DAG
    file's import built (``dags.taskflow``): its function may be nested in a ``@dag``."""
    if qualname.startswith(TASKFLOW_PREFIX):
        from raftsched.dags.taskflow import registered_callable

        return registered_callable(qualname)
    head, *rest = qualname.split(".")
    target: Any = namespace.get(head)
    for part in rest:
        target = getattr(target, part, None)
    return target if callable(target) else None


def check_kwargs(kwargs: object, *, dag_id: str, task_id: str) -> str:
    if kwargs is None:
        return "{}"
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise DagDefinitionError(
            f"kwargs of PythonTask {task_id!r} must be a dict with str keys,"
            f" got {short_repr(kwargs)}",
            dag_id=dag_id,
            task_id=task_id,
        )
    try:
        text = json.dumps(dict(kwargs), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as err:
        raise DagDefinitionError(
            f"kwargs of PythonTask {task_id!r} must be JSON-serializable: {err}",
            dag_id=dag_id,
            task_id=task_id,
        ) from None
    return check_kwargs_json(text, dag_id=dag_id, task_id=task_id)


def check_kwargs_json(text: str, *, dag_id: str, task_id: str) -> str:
    """A PythonTask's kwargs as JSON text: at most MAX_KWARGS_BYTES, MAX_KWARGS_DEPTH deep,
    clean strings (no NUL, no lone surrogate)."""
    where = f"PythonTask {task_id!r} in DAG {dag_id!r}"
    ids = {"dag_id": dag_id, "task_id": task_id}
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.MAX_KWARGS_BYTES:
        raise DagDefinitionError(
            f"{where}: kwargs is {size} bytes as JSON; the limit is {limits.MAX_KWARGS_BYTES}",
            **ids,
        )
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise DagDefinitionError(f"{where}: kwargs is not a JSON object ({err})", **ids) from None
    bounded(
        limits.check_json_object,
        "kwargs",
        value,
        limits.MAX_KWARGS_BYTES,
        MAX_KWARGS_DEPTH,
        where=where,
        **ids,
    )
    return text
