"""Checks on what a DAG file defines. Each raises DagDefinitionError with a message that names
the offending value and what is allowed.

Every value is also bounded as ``raftsched.core.limits`` says (sizes, counts, ranges, dates in
MIN_DATE..MAX_DATE, no NUL or invalid UTF-8): a spec the cluster's apply would refuse is a
DagDefinitionError here, shown under `dags errors`, never a registration. The constructors of
``authoring`` check each value as it is given; :func:`check_spec` checks a whole spec again
(``DAG.to_spec``, and the parser on what its child process sent).
The generic checks are in :mod:`raftsched.dags.value_checks` and a task's own in
:mod:`raftsched.dags.task_checks`; this module re-exports them, so ``validation.X`` names every
check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from raftsched.core import limits
from raftsched.core.limits import MAX_CALLABLE_CHARS, MAX_ZONE_CHARS
from raftsched.core.model import DagSpec, Schedule, ScheduleKind, TaskSpec
from raftsched.core.timetable import PRESETS, check_cron, get_zone
from raftsched.core.validate import HOST_ZONES
from raftsched.dags.task_checks import (
    MAX_KWARGS_DEPTH,
    TRIGGER_RULES,
    check_callable,
    check_command,
    check_env,
    check_env_pairs,
    check_kwargs,
    check_kwargs_json,
    check_pool,
    check_pool_slots,
    check_queue,
    check_trigger_rule,
    resolve_callable,
)
from raftsched.dags.value_checks import (
    ID_PATTERN,
    bounded,
    check_count,
    check_duration,
    check_id,
    short_repr,
)
from raftsched.errors import DagDefinitionError

__all__ = [
    "ID_PATTERN",
    "MAX_KWARGS_DEPTH",
    "TRIGGER_RULES",
    "bounded",
    "check_callable",
    "check_command",
    "check_count",
    "check_description",
    "check_duration",
    "check_env",
    "check_env_pairs",
    "check_id",
    "check_kwargs",
    "check_kwargs_json",
    "check_pool",
    "check_pool_slots",
    "check_queue",
    "check_spec",
    "check_tags",
    "check_trigger_rule",
    "check_zone",
    "find_cycle",
    "parse_schedule",
    "resolve_callable",
    "short_repr",
    "to_utc",
]


def check_zone(name: object, *, dag_id: str) -> ZoneInfo:
    if isinstance(name, ZoneInfo):
        name = name.key
    if not isinstance(name, str):
        raise DagDefinitionError(
            f"timezone of DAG {dag_id!r} must be an IANA name such as 'Europe/Berlin',"
            f" got {type(name).__name__}",
            dag_id=dag_id,
        )
    bounded(
        limits.check_text, "timezone", name, MAX_ZONE_CHARS, where=f"DAG {dag_id!r}", dag_id=dag_id
    )
    if name in HOST_ZONES:
        raise DagDefinitionError(
            f"DAG {dag_id!r}: timezone {name!r} is the host's own zone, which differs between"
            " machines; use an IANA name such as 'Europe/Berlin'",
            dag_id=dag_id,
        )
    try:
        return get_zone(name)
    except (ValueError, OSError) as err:  # OSError: a folder of the zone database ("America")
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
        if seconds > limits.MAX_DURATION_SECONDS:
            raise DagDefinitionError(
                f"schedule interval of DAG {dag_id!r} must be at most"
                f" {limits.MAX_DURATION_SECONDS} seconds (366 days), got {schedule!r}",
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
    bounded(
        limits.check_text,
        "schedule",
        schedule,
        limits.MAX_SCHEDULE_CHARS,
        where=f"DAG {dag_id!r}",
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
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError):  # year 1 east of UTC, year 9999 west of it
        utc = value  # check_datetime names the range below
    bounded(limits.check_datetime, what, utc, where=f"DAG {dag_id!r}", dag_id=dag_id)
    return utc


def check_tags(tags: object, *, dag_id: str) -> tuple[str, ...]:
    try:
        given = list(tags or ())  # type: ignore[call-overload]
    except TypeError:
        given = [None]
    if isinstance(tags, str) or not all(isinstance(t, str) for t in given):
        raise DagDefinitionError(
            f"tags of DAG {dag_id!r} must be a list of strings, got {short_repr(tags)}",
            dag_id=dag_id,
        )
    out = tuple(sorted(set(given)))
    where = f"DAG {dag_id!r}"
    bounded(limits.check_count, "tags", len(out), limits.MAX_TAGS, where=where, dag_id=dag_id)
    for tag in out:
        bounded(limits.check_text, "tag", tag, limits.MAX_TAG_CHARS, where=where, dag_id=dag_id)
    return out


def check_description(description: object, *, dag_id: str) -> str:
    return bounded(
        limits.check_text,
        "description",
        str(description),
        limits.MAX_DESCRIPTION_CHARS,
        where=f"DAG {dag_id!r}",
        dag_id=dag_id,
    )


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


# -- a whole spec -----------------------------------------------------------------------------


def check_spec(spec: DagSpec) -> DagSpec:
    """Every value of ``spec`` within ``raftsched.core.limits``: what the cluster's apply would
    refuse is a DagDefinitionError here. Returns ``spec``."""
    dag_id = spec.dag_id if isinstance(spec.dag_id, str) else ""
    where = f"DAG {dag_id[:250]!r}"

    def check(fn: Callable[..., Any], *args: Any) -> Any:
        return bounded(fn, *args, where=where, dag_id=dag_id)

    check(limits.check_id, "dag_id", spec.dag_id)
    check(limits.check_text, "fileloc", spec.fileloc, limits.MAX_FILELOC_CHARS)
    check_description(spec.description, dag_id=dag_id)
    check_tags(list(spec.tags), dag_id=dag_id)
    check(limits.check_params_json, "params_json", spec.params_json)
    check(limits.check_text, "timezone", spec.timezone, MAX_ZONE_CHARS)
    schedule = spec.schedule
    check(limits.check_text, "schedule", schedule.display, limits.MAX_SCHEDULE_CHARS)
    if schedule.cron is not None:
        check(limits.check_text, "schedule", schedule.cron, limits.MAX_SCHEDULE_CHARS)
    if schedule.interval_seconds is not None:
        check(
            limits.check_int,
            "schedule interval",
            schedule.interval_seconds,
            1,
            limits.MAX_DURATION_SECONDS,
        )
    for what, when in (("start_date", spec.start_date), ("end_date", spec.end_date)):
        if when is not None:
            check(limits.check_datetime, what, when)
    check(limits.check_int, "max_active_runs", spec.max_active_runs, 1, limits.MAX_ACTIVE)
    check(limits.check_int, "max_active_tasks", spec.max_active_tasks, 1, limits.MAX_ACTIVE)
    check(limits.check_count, "tasks", len(spec.tasks), limits.MAX_TASKS_PER_DAG)
    for task in spec.tasks:
        _check_task_spec(task, dag_id)
    return spec


def _check_task_spec(task: TaskSpec, dag_id: str) -> None:
    task_id = task.task_id if isinstance(task.task_id, str) else ""
    where = f"task {task_id[:250]!r} of DAG {dag_id!r}"

    def check(fn: Callable[..., Any], *args: Any) -> Any:
        return bounded(fn, *args, where=where, dag_id=dag_id, task_id=task_id)

    check(limits.check_id, "task_id", task.task_id)
    if task.kind not in ("bash", "python", "empty"):
        raise DagDefinitionError(
            f"{where}: kind {str(task.kind)[:40]!r} is not 'bash', 'python' or 'empty'",
            dag_id=dag_id,
            task_id=task_id,
        )
    if task.command is not None:
        check_command(task.command, dag_id=dag_id, task_id=task_id)
    check_env_pairs(tuple(task.env), dag_id=dag_id, task_id=task_id)
    if task.callable_name is not None:
        check(limits.check_text, "callable_name", task.callable_name, MAX_CALLABLE_CHARS)
    check_kwargs_json(task.kwargs_json, dag_id=dag_id, task_id=task_id)
    check(limits.check_int, "retries", task.retries, 0, limits.MAX_RETRIES)
    most = float(limits.MAX_DURATION_SECONDS)
    check(limits.check_float, "retry_delay", task.retry_delay_seconds, 0.0, most)
    if task.max_retry_delay_seconds is not None:
        check(limits.check_float, "max_retry_delay", task.max_retry_delay_seconds, 0.0, most)
    if task.execution_timeout_seconds is not None:
        check(limits.check_float, "execution_timeout", task.execution_timeout_seconds, 0.0, most)
    weight = limits.MAX_PRIORITY_WEIGHT
    check(limits.check_int, "priority_weight", task.priority_weight, -weight, weight)
    check_queue(task.queue, dag_id=dag_id, task_id=task_id)
    if task.pool:
        check_pool(task.pool, dag_id=dag_id, task_id=task_id)
    check_pool_slots(task.pool_slots, dag_id=dag_id, task_id=task_id)
    check(limits.check_ids, "upstream", task.upstream, limits.MAX_TASKS_PER_DAG)
