"""Checks on what a DAG file defines. Each raises DagDefinitionError with a message that names
the offending value and what is allowed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from raftsched.core.model import Schedule, ScheduleKind, TriggerRule
from raftsched.core.timetable import PRESETS, check_cron, get_zone
from raftsched.errors import DagDefinitionError

ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,250}")
TRIGGER_RULES = tuple(rule.value for rule in TriggerRule)


def check_id(kind: str, value: object, *, dag_id: str = "") -> str:
    """``kind`` is "dag_id" or "task_id"."""
    task_id = str(value) if kind == "task_id" else ""
    if not isinstance(value, str):
        raise DagDefinitionError(
            f"{kind} must be a string, got {type(value).__name__} {value!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    if not ID_PATTERN.fullmatch(value):
        if not value or len(value) > 250:
            why = f"it must be 1 to 250 characters long (it has {len(value)})"
        else:
            bad = sorted({ch for ch in value if not re.fullmatch(r"[A-Za-z0-9_.-]", ch)})
            why = f"{''.join(bad)!r} not allowed; use letters, digits, '_', '.' and '-'"
        raise DagDefinitionError(
            f"invalid {kind} {value[:60]!r}: {why}", dag_id=dag_id, task_id=task_id
        )
    return value


def check_zone(name: object, *, dag_id: str) -> ZoneInfo:
    if isinstance(name, ZoneInfo):
        name = name.key
    if not isinstance(name, str):
        raise DagDefinitionError(
            f"timezone of DAG {dag_id!r} must be an IANA name such as 'Europe/Berlin',"
            f" got {type(name).__name__}",
            dag_id=dag_id,
        )
    try:
        return get_zone(name)
    except ValueError as err:
        raise DagDefinitionError(f"DAG {dag_id!r}: {err}", dag_id=dag_id) from None


def parse_schedule(schedule: object, *, dag_id: str) -> Schedule:
    """A cron text, a preset, ``@once``, a ``timedelta`` or None -> a Schedule."""
    if schedule is None:
        return Schedule(ScheduleKind.NONE, display="None")
    if isinstance(schedule, timedelta):
        seconds = schedule.total_seconds()
        if seconds < 1 or seconds != int(seconds):
            raise DagDefinitionError(
                f"schedule interval of DAG {dag_id!r} must be a positive whole number of"
                f" seconds, got {schedule!r}",
                dag_id=dag_id,
            )
        return Schedule(
            ScheduleKind.INTERVAL, interval_seconds=int(seconds), display=_timedelta_text(schedule)
        )
    if not isinstance(schedule, str):
        raise DagDefinitionError(
            f"schedule of DAG {dag_id!r} must be a cron expression, a preset such as '@daily',"
            f" '@once', a timedelta or None; got {type(schedule).__name__} {schedule!r}",
            dag_id=dag_id,
        )
    text = schedule.strip()
    if text.lower() == "@once":
        return Schedule(ScheduleKind.ONCE, display="@once")
    if text.startswith("@"):
        cron = PRESETS.get(text.lower())
        if cron is None:
            allowed = ", ".join(["@once", *PRESETS])
            raise DagDefinitionError(
                f"unknown schedule preset {text!r} in DAG {dag_id!r}; allowed: {allowed}",
                dag_id=dag_id,
            )
        return Schedule(ScheduleKind.CRON, cron=cron, display=text)
    try:
        cron = check_cron(text)
    except ValueError as err:
        raise DagDefinitionError(f"DAG {dag_id!r}: {err}", dag_id=dag_id) from None
    return Schedule(ScheduleKind.CRON, cron=cron, display=cron)


def _timedelta_text(value: timedelta) -> str:
    parts = []
    rest = int(value.total_seconds())
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60), ("seconds", 1)):
        amount, rest = divmod(rest, size)
        if amount:
            parts.append(f"{unit}={amount}")
    return f"timedelta({', '.join(parts)})"


def to_utc(value: object, zone: ZoneInfo, *, what: str, dag_id: str) -> datetime | None:
    """A naive datetime (or date) is wall-clock time in ``zone``; the result is aware UTC."""
    if value is None:
        return None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if not isinstance(value, datetime):
        raise DagDefinitionError(
            f"{what} of DAG {dag_id!r} must be a datetime, got {type(value).__name__} {value!r}",
            dag_id=dag_id,
        )
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return value.astimezone(UTC)


def check_count(value: object, what: str, *, minimum: int, dag_id: str, task_id: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DagDefinitionError(
            f"{what} must be an integer >= {minimum}, got {value!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    return value


def check_duration(
    value: object, what: str, *, dag_id: str, task_id: str = "", positive: bool = False
) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise DagDefinitionError(
            f"{what} must be a timedelta, got {type(value).__name__} {value!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    seconds = value.total_seconds()
    if seconds < 0 or (positive and seconds == 0):
        raise DagDefinitionError(
            f"{what} must be {'positive' if positive else 'zero or more'}, got {value}",
            dag_id=dag_id,
            task_id=task_id,
        )
    return seconds


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


def check_env(env: object, *, dag_id: str, task_id: str) -> tuple[tuple[str, str], ...]:
    if env is None:
        return ()
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise DagDefinitionError(
            f"env of task {task_id!r} must be a dict of str to str, got {env!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    return tuple(sorted(env.items()))


def check_callable(fn: object, *, dag_id: str, task_id: str) -> str:
    """The ``__qualname__`` of a module-level function; rejects lambdas and nested functions."""
    if not callable(fn) or not hasattr(fn, "__qualname__"):
        raise DagDefinitionError(
            f"fn of PythonTask {task_id!r} must be a function, got {type(fn).__name__}",
            dag_id=dag_id,
            task_id=task_id,
        )
    qualname: str = fn.__qualname__
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
    """Look ``qualname`` ("fn" or "Class.fn") up in a module's namespace; None if absent."""
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
            f"kwargs of PythonTask {task_id!r} must be a dict with str keys, got {kwargs!r}",
            dag_id=dag_id,
            task_id=task_id,
        )
    try:
        return json.dumps(dict(kwargs), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise DagDefinitionError(
            f"kwargs of PythonTask {task_id!r} must be JSON-serializable: {err}",
            dag_id=dag_id,
            task_id=task_id,
        ) from None


def find_cycle(upstream: Mapping[str, set[str]]) -> list[str] | None:
    """A dependency cycle as a path ``[a, b, c, a]`` (a runs before b ...), or None.

    ``upstream[t]`` holds the tasks ``t`` depends on. Deterministic: tasks in sorted order.
    """
    downstream: dict[str, list[str]] = {task: [] for task in upstream}
    for task, ups in upstream.items():
        for up in ups:
            downstream.setdefault(up, []).append(task)
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(downstream, white)
    for root in sorted(downstream):
        if colour[root] != white:
            continue
        path: list[str] = [root]
        stack = [iter(sorted(downstream[root]))]
        colour[root] = grey
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                stack.pop()
            elif colour[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            elif colour[nxt] == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append(iter(sorted(downstream[nxt])))
    return None
