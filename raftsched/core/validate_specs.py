"""The core's check of DAG specs (a ``RegisterDags`` command's payload), before apply.

:func:`check_spec` walks every field of a DAG spec (types, ranges, sizes, characters: the
bounds of ``core.limits``; the schedule, the time zone, each task, the task graph) and raises
:class:`~raftsched.errors.LimitExceeded` naming the first field that breaks one. The field
helpers here are shared with the command checks of ``core.validate``.

Pure: no I/O beyond reading the time zone database (deterministic for one tzdata release).
"""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from raftsched.core import asset_condition as ac
from raftsched.core import asset_watchers, mapping
from raftsched.core import callbacks as cb
from raftsched.core import limits as lim
from raftsched.core.limits import (
    check_count,
    check_datetime,
    check_float,
    check_id,
    check_int,
    check_text,
)
from raftsched.core.model import DagSpec, Schedule, ScheduleKind, TaskSpec, TriggerRule
from raftsched.core.past_deps import PAST_DEPS
from raftsched.core.pool_table import MAX_POOL_SLOTS
from raftsched.core.slot_policy import OVERLAP_POLICIES
from raftsched.core.timetable import check_cron
from raftsched.core.timetable_dst import DST_REPEATED, DST_SKIPPED
from raftsched.errors import LimitExceeded

# "empty": finished by the scheduler when ready, never leased (core/transitions.settle)
TASK_KINDS = frozenset({"bash", "python", "empty"})
HOST_ZONES = frozenset({"localtime", "posixrules", "Factory"})


# -- field helpers ----------------------------------------------------------------------------


def tuple_field(field: str, value: object, max_count: int) -> tuple[Any, ...]:
    if not isinstance(value, tuple):
        raise LimitExceeded(field, f"must be a tuple, got {type(value).__name__}")
    check_count(field, len(value), max_count)
    return value


def bool_field(field: str, value: object) -> None:
    if not isinstance(value, bool):
        raise LimitExceeded(field, f"must be a boolean, got {type(value).__name__}")


def enum_field(field: str, value: object, kind: type) -> None:
    if isinstance(value, kind):
        return
    try:
        kind(value)
    except (ValueError, TypeError):
        raise LimitExceeded(field, f"{str(value)[:40]!r} is not a valid {kind.__name__}") from None


def duration_field(
    field: str, value: object, *, optional: bool = False, positive: bool = False
) -> None:
    if value is None and optional:
        return
    check_float(field, value, 0.0, lim.MAX_DURATION_SECONDS)
    if positive and not float(value) > 0:  # type: ignore[arg-type]
        raise LimitExceeded(field, "must be greater than 0")


# -- DAG specs --------------------------------------------------------------------------------


def check_spec(spec: object, field: str = "spec") -> None:
    if not isinstance(spec, DagSpec):
        raise LimitExceeded(field, f"must be a DagSpec, got {type(spec).__name__}")
    field = f"{field}({str(spec.dag_id)[:60]})"
    check_id(f"{field}.dag_id", spec.dag_id)
    check_text(f"{field}.fileloc", spec.fileloc, lim.MAX_FILELOC_CHARS)
    _schedule(f"{field}.schedule", spec.schedule)
    check_text(f"{field}.timezone", spec.timezone, lim.MAX_ZONE_CHARS, empty=False)
    try:
        if spec.timezone in HOST_ZONES:  # the host's own zone: would differ between nodes
            raise ValueError(spec.timezone)
        ZoneInfo(spec.timezone)
    except Exception:  # ZoneInfoNotFoundError, ValueError for a path, ...
        raise LimitExceeded(f"{field}.timezone", f"{spec.timezone!r} is not an IANA zone") from None
    check_datetime(f"{field}.start_date", spec.start_date, optional=True)
    check_datetime(f"{field}.end_date", spec.end_date, optional=True)
    bool_field(f"{field}.catchup", spec.catchup)
    check_int(f"{field}.max_active_runs", spec.max_active_runs, 1, lim.MAX_ACTIVE)
    check_int(f"{field}.max_active_tasks", spec.max_active_tasks, 1, lim.MAX_ACTIVE)
    for i, tag in enumerate(tuple_field(f"{field}.tags", spec.tags, lim.MAX_TAGS)):
        check_text(f"{field}.tags[{i}]", tag, lim.MAX_TAG_CHARS)
    check_text(f"{field}.description", spec.description, lim.MAX_DESCRIPTION_CHARS)
    check_text(f"{field}.spec_hash", spec.spec_hash, 64)
    lim.check_params_json(f"{field}.params_json", spec.params_json)
    cb.check_callbacks(f"{field}.callbacks", spec.callbacks, cb.DAG_EVENTS)
    cb.check_deadline(f"{field}.deadline_seconds", spec.deadline_seconds)
    timeout = getattr(spec, "dagrun_timeout_seconds", None)  # core/run_timeout.py
    duration_field(f"{field}.dagrun_timeout_seconds", timeout, optional=True, positive=True)
    if spec.overlap not in OVERLAP_POLICIES:
        policies = ", ".join(p for p in OVERLAP_POLICIES if p)
        raise LimitExceeded(f"{field}.overlap", f"must be one of {policies}")
    if spec.catchup_window_seconds is not None:
        check_float(
            f"{field}.catchup_window_seconds",
            spec.catchup_window_seconds,
            0.0,
            lim.MAX_CATCHUP_WINDOW_SECONDS,
        )
    if spec.jitter_seconds is not None:
        check_float(f"{field}.jitter_seconds", spec.jitter_seconds, 0.0, lim.MAX_JITTER_SECONDS)
    bool_field(f"{field}.pause_on_failure", spec.pause_on_failure)
    if spec.dst_repeated not in DST_REPEATED:
        raise LimitExceeded(f"{field}.dst_repeated", "must be 'once' or 'twice'")
    if spec.dst_skipped not in DST_SKIPPED:
        raise LimitExceeded(f"{field}.dst_skipped", "must be 'shift' or 'skip'")
    if spec.max_runs is not None:
        check_int(f"{field}.max_runs", spec.max_runs, 1, lim.MAX_RUNS_LIMIT)
    tasks = tuple_field(f"{field}.tasks", spec.tasks, lim.MAX_TASKS_PER_DAG)
    for task in tasks:
        _task(f"{field}.tasks", task)
    _graph(f"{field}.tasks", tasks)
    _assets(field, spec, tasks)
    if any(getattr(task, "expand_json", "") for task in tasks):  # instance ids are free
        for task in tasks:
            if mapping.is_instance(task.task_id):
                raise LimitExceeded(
                    f"{field}.tasks[{task.task_id}]", "ends like a mapped instance's id ([n])"
                )


def _assets(field: str, spec: DagSpec, tasks: tuple[TaskSpec, ...]) -> None:
    """Outlets, inlets and the asset condition (§21): at most MAX_ASSETS_PER_DAG URIs in all."""
    condition = ac.check_condition(f"{field}.asset_condition", spec.asset_condition)
    uris = set(ac.uris_of(condition)) if condition is not None else set()
    watchers = getattr(spec, "asset_watchers", "")  # on the assets of the schedule only
    asset_watchers.check(f"{field}.asset_watchers", watchers, frozenset(uris))
    for task in tasks:
        for name in ("outlets", "inlets"):
            uris.update(ac.check_uris(f"{field}.tasks[{task.task_id}].{name}", getattr(task, name)))
    if len(uris) > ac.MAX_ASSETS_PER_DAG:
        raise LimitExceeded(f"{field}", f"names more than {ac.MAX_ASSETS_PER_DAG} assets")


def _schedule(field: str, schedule: object) -> None:
    if not isinstance(schedule, Schedule):
        raise LimitExceeded(field, f"must be a Schedule, got {type(schedule).__name__}")
    enum_field(f"{field}.kind", schedule.kind, ScheduleKind)
    check_text(f"{field}.display", schedule.display, lim.MAX_SCHEDULE_CHARS)
    kind = ScheduleKind(schedule.kind)
    if kind is ScheduleKind.CRON:
        check_text(f"{field}.cron", schedule.cron, lim.MAX_SCHEDULE_CHARS, empty=False)
        try:
            check_cron(str(schedule.cron))
        except (ValueError, TypeError, KeyError, OverflowError) as err:
            raise LimitExceeded(f"{field}.cron", f"is invalid: {str(err)[:200]}") from None
    elif kind is ScheduleKind.INTERVAL:
        check_int(
            f"{field}.interval_seconds", schedule.interval_seconds, 1, lim.MAX_DURATION_SECONDS
        )


def _task(field: str, task: object) -> None:
    if not isinstance(task, TaskSpec):
        raise LimitExceeded(field, f"must hold TaskSpecs, got {type(task).__name__}")
    check_id(f"{field}.task_id", task.task_id)
    field = f"{field}[{task.task_id}]"
    if not isinstance(task.kind, str) or task.kind not in TASK_KINDS:
        raise LimitExceeded(f"{field}.kind", "must be 'bash', 'python' or 'empty'")
    if task.command is not None:
        check_text(f"{field}.command", task.command, lim.MAX_COMMAND_CHARS)
    for i, pair in enumerate(tuple_field(f"{field}.env", task.env, lim.MAX_ENV_VARS)):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise LimitExceeded(f"{field}.env[{i}]", "must be a (name, value) pair")
        check_text(f"{field}.env[{i}].name", pair[0], lim.MAX_ENV_NAME_CHARS, empty=False)
        check_text(f"{field}.env[{i}].value", pair[1], lim.MAX_ENV_VALUE_CHARS)
    if task.callable_name is not None:
        check_text(f"{field}.callable_name", task.callable_name, lim.MAX_CALLABLE_CHARS)
    if getattr(task, "skip_on_exit_code", None) is not None:  # an exit status of bash
        check_int(f"{field}.skip_on_exit_code", task.skip_on_exit_code, 1, 255)
    check_text(f"{field}.kwargs_json", task.kwargs_json, lim.MAX_KWARGS_BYTES)
    check_int(f"{field}.retries", task.retries, 0, lim.MAX_RETRIES)
    duration_field(f"{field}.retry_delay_seconds", task.retry_delay_seconds)
    bool_field(f"{field}.retry_exponential_backoff", task.retry_exponential_backoff)
    duration_field(f"{field}.max_retry_delay_seconds", task.max_retry_delay_seconds, optional=True)
    duration_field(
        f"{field}.execution_timeout_seconds",
        task.execution_timeout_seconds,
        optional=True,
        positive=True,
    )
    check_int(
        f"{field}.priority_weight",
        task.priority_weight,
        -lim.MAX_PRIORITY_WEIGHT,
        lim.MAX_PRIORITY_WEIGHT,
    )
    enum_field(f"{field}.trigger_rule", task.trigger_rule, TriggerRule)
    cb.check_callbacks(f"{field}.callbacks", task.callbacks, cb.TASK_EVENTS)
    check_id(f"{field}.queue", task.queue)  # a queue name: the charset and size of an id
    if getattr(task, "pool", "") != "":  # a pool name, as a queue's ("": default_pool)
        check_id(f"{field}.pool", task.pool)
    check_int(f"{field}.pool_slots", getattr(task, "pool_slots", 1), 1, MAX_POOL_SLOTS)
    _mapping(field, task)
    if getattr(task, "past_deps", "") not in PAST_DEPS:
        raise LimitExceeded(f"{field}.past_deps", f"must be one of {sorted(PAST_DEPS)}")
    bool_field(f"{field}.trigger_dagrun", getattr(task, "trigger_dagrun", False))
    if getattr(task, "trigger_dagrun", False) and task.kind != "python":
        raise LimitExceeded(f"{field}.trigger_dagrun", "is for python tasks (its return value)")
    for i, upstream in enumerate(
        tuple_field(f"{field}.upstream", task.upstream, lim.MAX_TASKS_PER_DAG)
    ):
        check_id(f"{field}.upstream[{i}]", upstream)


def _graph(field: str, tasks: tuple[TaskSpec, ...]) -> None:
    """Task ids unique, upstreams known, no cycle (Kahn's algorithm: no recursion)."""
    ids = [t.task_id for t in tasks]
    known = set(ids)
    if len(known) != len(ids):
        raise LimitExceeded(field, "has a task id twice")
    waiting = {t.task_id: len(set(t.upstream)) for t in tasks}
    downstream: dict[str, list[str]] = {t: [] for t in ids}
    for t in tasks:
        for up in set(t.upstream):
            if up not in known:
                raise LimitExceeded(f"{field}[{t.task_id}].upstream", f"names unknown task {up!r}")
            downstream[up].append(t.task_id)
    ready = [t for t, n in waiting.items() if n == 0]
    seen = 0
    while ready:
        seen += 1
        for down in downstream[ready.pop()]:
            waiting[down] -= 1
            if waiting[down] == 0:
                ready.append(down)
    if seen != len(ids):
        raise LimitExceeded(field, "has a dependency cycle")


def _mapping(field: str, task: TaskSpec) -> None:
    """A mapped task's expansion and bound (core/mapping.py); an unmapped one has neither."""
    expand_json = getattr(task, "expand_json", "")
    bound = getattr(task, "max_map_length", 0)
    check_int(f"{field}.max_map_length", bound, 0, lim.MAX_MAP_LENGTH)
    if not expand_json:
        return
    check_text(f"{field}.task_id", task.task_id, mapping.MAX_MAPPED_TASK_ID_CHARS)
    mapping.check_expand_json(f"{field}.expand_json", expand_json, tuple(task.upstream))
