"""``DAG``: a DAG file's DAG object, the ``with DAG(...)`` context and the parser's collection.

A DAG checks each option as it is given (:mod:`raftsched.dags.validation`) and turns into a
validated, hashed ``DagSpec`` with :meth:`DAG.to_spec`. Tasks (:mod:`raftsched.dags.tasks`)
join the DAG of the innermost enclosing ``with DAG(...)`` block. Re-exported by
:mod:`raftsched.dags.authoring`, the public authoring API.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from raftsched.core import limits
from raftsched.core.model import DEFAULT_QUEUE, DagSpec
from raftsched.core.slot_policy import ALLOW_ALL, OVERLAP_POLICIES
from raftsched.dags import validation as v
from raftsched.dags.assets import condition_json, is_asset_schedule, watchers_json
from raftsched.dags.callbacks import TASK_CALLBACKS, DeadlineAlert, dag_callbacks
from raftsched.dags.mapping import check_max_map_length
from raftsched.dags.params import params_json_from
from raftsched.errors import DagDefinitionError

if TYPE_CHECKING:
    from raftsched.dags.tasks import Task

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
        schedule: Any,  # cron text, a timedelta, None, or assets (raftsched.dags.assets)
        start_date: datetime | None = None,
        end_date: datetime | None = None,
        timezone: str = "UTC",
        catchup: bool | None = None,  # None: [scheduler] catchup_by_default
        max_active_runs: int = 16,
        max_active_tasks: int = 16,
        default_retries: int | None = None,  # None: default_args["retries"], else 0
        default_retry_delay: timedelta | None = None,  # None: default_args, else 5 minutes
        default_queue: str | None = None,  # None: default_args["queue"], else "default"
        default_args: Mapping[str, Any] | None = None,
        tags: Iterable[str] | None = None,
        description: str = "",
        params: Mapping[str, Any] | None = None,
        on_failure_callback: Any = None,  # run-level callbacks (raftsched.dags.callbacks)
        on_success_callback: Any = None,
        deadline: timedelta | DeadlineAlert | None = None,
        on_deadline_callback: Any = None,
        max_map_length: int | None = None,  # mapped tasks' bound; None: [core] max_map_length
        overlap: str = "allow_all",  # schedule policies: raftsched.core.slot_policy
        catchup_window: timedelta | None = None,
        max_runs: int | None = None,
        jitter: timedelta | None = None,
        pause_on_failure: bool = False,
        on_skipped_callback: Any = None,  # slots a schedule policy skipped (once per range)
        dst_repeated: str = "once",  # cron with fixed hours: core/timetable_dst.py
        dst_skipped: str = "shift",
        dagrun_timeout: timedelta | None = None,  # a run still unfinished then fails
    ) -> None:
        self.dag_id = v.check_id("dag_id", dag_id)
        self.max_map_length = (
            None if max_map_length is None else check_max_map_length(max_map_length, dag_id=dag_id)
        )
        self.asset_condition = ""  # schedule=[Asset(...), ...]: runs on data (dags/assets.py)
        self.asset_watchers = ""
        if is_asset_schedule(schedule):
            self.asset_condition = condition_json(schedule, dag_id)
            self.asset_watchers = watchers_json(schedule, dag_id)  # their triggers' events
            schedule = None
        self.schedule = v.parse_schedule(schedule, dag_id=dag_id)
        if self.asset_condition:
            self.schedule = replace(self.schedule, display="assets")
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
        defaults = _default_args(default_args, dag_id)
        if default_retries is None:
            default_retries = defaults.get("retries", 0)
        if default_retry_delay is None:
            default_retry_delay = defaults.get("retry_delay", timedelta(minutes=5))
        queue = defaults.get("queue", DEFAULT_QUEUE) if default_queue is None else default_queue
        self.default_queue = v.check_queue(queue, dag_id=dag_id)
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
        self.dagrun_timeout_seconds = v.check_duration(  # core/run_timeout.py
            dagrun_timeout, f"dagrun_timeout of DAG {dag_id!r}", positive=True, dag_id=dag_id
        )
        self.description = v.check_description(description, dag_id=dag_id)
        # {name: value or Param} -> canonical JSON (raftsched.dags.params): checked here, so
        # a bad default or a required param on a scheduled DAG is a `dags errors` entry
        self.params_json = params_json_from(
            params, dag_id=dag_id, scheduled=self.schedule.kind.value != "none"
        )
        self.callbacks, self.deadline_seconds = dag_callbacks(
            dag_id=dag_id,
            on_failure_callback=on_failure_callback,
            on_success_callback=on_success_callback,
            deadline=deadline,
            on_deadline_callback=on_deadline_callback,
            on_skipped_callback=on_skipped_callback,
        )
        if not isinstance(overlap, str) or overlap not in OVERLAP_POLICIES or not overlap:
            choices = ", ".join(p for p in OVERLAP_POLICIES if p)
            raise DagDefinitionError(
                f"overlap of DAG {dag_id!r} must be one of {choices}, got {v.short_repr(overlap)}",
                dag_id=dag_id,
            )
        self.overlap = "" if overlap == ALLOW_ALL else overlap  # the default is left out
        self.catchup_window_seconds = v.check_duration(
            catchup_window, f"catchup_window of DAG {dag_id!r}", dag_id=dag_id
        )
        self.max_runs = (
            None
            if max_runs is None
            else v.check_count(
                max_runs,
                f"max_runs of DAG {dag_id!r}",
                minimum=1,
                maximum=limits.MAX_RUNS_LIMIT,
                dag_id=dag_id,
            )
        )
        if dst_repeated not in ("once", "twice") or dst_skipped not in ("shift", "skip"):
            raise DagDefinitionError(
                f"DAG {dag_id!r}: dst_repeated must be 'once' or 'twice' and dst_skipped 'shift'"
                f" or 'skip', got {v.short_repr(dst_repeated)} and {v.short_repr(dst_skipped)}",
                dag_id=dag_id,
            )
        # the defaults are left out of the spec (its hash stays the previous release's)
        self.dst_repeated = "" if dst_repeated == "once" else dst_repeated
        self.dst_skipped = "" if dst_skipped == "shift" else dst_skipped
        if not isinstance(pause_on_failure, bool):
            raise DagDefinitionError(
                f"pause_on_failure of DAG {dag_id!r} must be True or False", dag_id=dag_id
            )
        self.pause_on_failure = pause_on_failure
        self.jitter_seconds = v.check_duration(jitter, f"jitter of DAG {dag_id!r}", dag_id=dag_id)
        # default_args' task callbacks: every task of this DAG that sets none gets them
        self.default_callbacks = {k: defaults[k] for k in TASK_CALLBACKS if k in defaults}
        self.tasks: dict[str, Task] = {}
        # env entries every task of the DAG gets in its spec: how a layer over this API
        # (raftsched.airflow) tells the worker about the DAG, e.g. dags.template_names.MARKER
        self.task_env_extra: dict[str, str] = {}
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
            params_json=self.params_json,
            callbacks=self.callbacks,
            deadline_seconds=self.deadline_seconds,
            overlap=self.overlap,
            catchup_window_seconds=self.catchup_window_seconds,
            max_runs=self.max_runs,
            jitter_seconds=self.jitter_seconds or None,
            pause_on_failure=self.pause_on_failure,
            dst_repeated=self.dst_repeated,
            dst_skipped=self.dst_skipped,
            dagrun_timeout_seconds=self.dagrun_timeout_seconds,
            asset_condition=self.asset_condition,
            asset_watchers=self.asset_watchers,
            tasks=tuple(self._task_spec(self.tasks[tid]) for tid in sorted(self.tasks)),
        )
        return _with_hash(v.check_spec(spec))

    def _task_spec(self, task: Task) -> Any:
        spec = task.to_spec()
        if not self.task_env_extra:
            return spec
        env = {**self.task_env_extra, **dict(spec.env)}  # the task's own entry wins
        return replace(spec, env=tuple(sorted(env.items())))


# Airflow's default_args keys a DAG takes (each the same as its default_<key> argument, which
# wins when both are given); any other key is refused rather than silently ignored.
DEFAULT_ARGS = ("queue", "retries", "retry_delay", *TASK_CALLBACKS)


def _default_args(default_args: Mapping[str, Any] | None, dag_id: str) -> dict[str, Any]:
    if default_args is None:
        return {}
    if not isinstance(default_args, Mapping):
        raise DagDefinitionError(
            f"default_args of DAG {dag_id!r} must be a dict, got {type(default_args).__name__}",
            dag_id=dag_id,
        )
    unknown = sorted(str(key) for key in default_args if key not in DEFAULT_ARGS)
    if unknown:
        raise DagDefinitionError(
            f"default_args of DAG {dag_id!r}: {', '.join(map(repr, unknown))} not supported;"
            f" it takes {', '.join(DEFAULT_ARGS)} (set other options on each task)",
            dag_id=dag_id,
        )
    return dict(default_args)


def _with_hash(spec: DagSpec) -> DagSpec:
    return replace(spec, spec_hash=spec.compute_hash())
