"""The domain model shared by every layer: DAG specs, runs, task instances, outbox entries.

Pure data. Datetimes are timezone-aware UTC everywhere inside raftsched; a DAG's own time
zone matters only for its schedule (``core.timetable``). Every type pickles small (Raft
commands, snapshots) and converts to and from JSON-able dicts (parser, DB, API).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from raftsched.core.added_fields import (  # noqa: F401 (their home was here)
    OMIT_AT_DEFAULT,
    _fields_dict,
    added_field,
    omitted_at_default,
)


class TriggerRule(StrEnum):
    ALL_SUCCESS = "all_success"
    ALL_DONE = "all_done"
    ALL_FAILED = "all_failed"
    ONE_SUCCESS = "one_success"
    ONE_FAILED = "one_failed"
    NONE_FAILED = "none_failed"
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    ALL_SKIPPED = "all_skipped"
    NONE_SKIPPED = "none_skipped"


class RunType(StrEnum):
    SCHEDULED = "scheduled"
    MANUAL = "manual"
    ASSET_TRIGGERED = "asset_triggered"  # made by asset events (core/asset_commands.py)


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


FINISHED_RUN_STATES = frozenset({RunState.SUCCESS, RunState.FAILED})


class TaskState(StrEnum):
    NONE = "none"  # exists in the run, not yet ready
    QUEUED = "queued"  # ready; waiting for a worker to lease it
    RUNNING = "running"  # leased to one worker under a fencing token
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"  # failed, will be queued again at next_retry_at
    UPSTREAM_FAILED = "upstream_failed"  # can never run: its trigger rule cannot be met
    SKIPPED = "skipped"
    DEFERRED = "deferred"  # waits on a trigger (core/trigger_table.py), holding no worker slot


FINISHED_TASK_STATES = frozenset(
    {TaskState.SUCCESS, TaskState.FAILED, TaskState.UPSTREAM_FAILED, TaskState.SKIPPED}
)


class ScheduleKind(StrEnum):
    CRON = "cron"  # 5-field cron, or 6-field cron whose last field is seconds (croniter)
    INTERVAL = "interval"  # fixed timedelta from start_date
    ONCE = "once"  # @once: a single run at start_date
    NONE = "none"  # manual triggers only


def utc_iso(value: datetime | None) -> str | None:
    """ISO-8601 text of an aware datetime, normalized to UTC; None stays None."""
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: raftsched stores aware UTC datetimes only")
    return value.astimezone(UTC).isoformat()


def parse_utc(value: str | None) -> datetime | None:
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"naive ISO datetime {value!r}: expected an offset, e.g. +00:00")
    return parsed.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Schedule:
    kind: ScheduleKind
    cron: str | None = None  # CRON: croniter's expression, presets expanded ("0 0 * * *")
    interval_seconds: int | None = None  # INTERVAL: the period in whole seconds
    display: str = ""  # what the author wrote ("@daily", "*/5 * * * *", "timedelta(hours=1)")


DEFAULT_QUEUE = "default"  # the queue of a task that names none, and of a worker without --queues


@dataclass(frozen=True, slots=True)
class TaskSpec:
    task_id: str
    kind: str  # "bash" | "python"
    command: str | None = None  # bash
    env: tuple[tuple[str, str], ...] = ()  # bash; sorted pairs
    callable_name: str | None = None  # python: attribute path of the function in the DAG file
    kwargs_json: str = "{}"  # python: JSON object text
    retries: int = 0
    retry_delay_seconds: float = 300.0
    retry_exponential_backoff: bool = False
    max_retry_delay_seconds: float | None = None
    execution_timeout_seconds: float | None = None
    priority_weight: int = 1
    trigger_rule: TriggerRule = TriggerRule.ALL_SUCCESS
    upstream: tuple[str, ...] = ()  # sorted task ids this task depends on
    queue: str = added_field(DEFAULT_QUEUE)  # leased by workers serving it (worker --queues)
    skip_on_exit_code: int | None = added_field(None)  # bash: this exit code ends it SKIPPED
    # (event "failure"|"success"|"retry", DAG file name or "raftsched:...", kwargs JSON)
    callbacks: tuple[tuple[str, str, str], ...] = added_field(())
    expand_json: str = added_field("")  # dynamic task mapping (core/mapping.py); "": none
    max_map_length: int = added_field(0)  # its bound on instances (0: the default, 1,024)
    pool: str = added_field("")  # the pool its attempts take slots of ("": default_pool)
    pool_slots: int = added_field(1)  # slots one attempt takes (core/pool_table.py)
    past_deps: str = added_field("")  # depends_on_past & co (core/past_deps.py); "": none
    trigger_dagrun: bool = added_field(False)  # its outcome creates a run (core/dagrun_trigger)
    outlets: tuple[str, ...] = added_field(())  # asset URIs a success emits events of (§21)
    inlets: tuple[str, ...] = added_field(())  # asset URIs the task reads (its context's)


@dataclass(frozen=True, slots=True)
class DagSpec:
    """One parsed DAG. ``spec_hash`` is a stable hash of everything else (see ``compute_hash``)."""

    dag_id: str
    fileloc: str
    schedule: Schedule
    timezone: str = "UTC"
    start_date: datetime | None = None  # aware UTC
    end_date: datetime | None = None  # aware UTC
    catchup: bool = False
    max_active_runs: int = 16
    max_active_tasks: int = 16
    tags: tuple[str, ...] = ()
    description: str = ""
    tasks: tuple[TaskSpec, ...] = ()  # sorted by task_id
    spec_hash: str = ""
    params_json: str = added_field("")  # canonical JSON text ("": none), dags/params.py
    callbacks: tuple[tuple[str, str, str], ...] = added_field(())  # failure|success|deadline
    deadline_seconds: float | None = added_field(None)  # past logical date + it: "deadline"
    # Schedule policies, see core/slot_policy.py ("" = allow_all; None: no window, no end)
    overlap: str = added_field("")
    catchup_window_seconds: float | None = added_field(None)
    max_runs: int | None = added_field(None)
    jitter_seconds: float | None = added_field(None)
    pause_on_failure: bool = added_field(False)  # a failed run pauses the DAG, with a note
    dst_repeated: str = added_field("")  # core/timetable_dst.py ("": once)
    dst_skipped: str = added_field("")  # ("": shift)
    dagrun_timeout_seconds: float | None = added_field(None)  # core/run_timeout.py
    asset_condition: str = added_field("")  # JSON (core/asset_condition.py); "": no assets
    asset_watchers: str = added_field("")  # JSON (core/asset_watchers.py); "": none

    def task(self, task_id: str) -> TaskSpec:
        for task in self.tasks:
            if task.task_id == task_id:
                return task
        raise KeyError(task_id)

    def to_dict(self) -> dict[str, Any]:
        data = _fields_dict(self)  # asdict without its deep copy (10x the time of the rest)
        data["schedule"] = _fields_dict(self.schedule)
        data["start_date"] = utc_iso(self.start_date)
        data["end_date"] = utc_iso(self.end_date)
        data["tags"] = list(self.tags)
        data["tasks"] = [
            {
                key: value
                for key, value in {
                    **_fields_dict(task),
                    "env": [list(pair) for pair in task.env],
                    "upstream": list(task.upstream),
                }.items()
                if key not in omitted
            }
            for task, omitted in zip(self.tasks, map(omitted_at_default, self.tasks), strict=True)
        ]
        for name in omitted_at_default(self):
            data.pop(name, None)
        return json.loads(json.dumps(data))  # StrEnums -> str; a check that it is JSON-able

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], tasks_seen: dict[Any, TaskSpec] | None = None
    ) -> DagSpec:
        """``tasks_seen`` (a restore's): tasks built so far, by their dict's text: shared."""
        schedule = data["schedule"]
        tasks = tuple(_task_from_dict(task, tasks_seen) for task in data.get("tasks", ()))
        return cls(
            dag_id=data["dag_id"],
            fileloc=data["fileloc"],
            schedule=Schedule(
                kind=ScheduleKind(schedule["kind"]),
                cron=schedule.get("cron"),
                interval_seconds=schedule.get("interval_seconds"),
                display=schedule.get("display", ""),
            ),
            timezone=data.get("timezone", "UTC"),
            start_date=parse_utc(data.get("start_date")),
            end_date=parse_utc(data.get("end_date")),
            catchup=bool(data.get("catchup", False)),
            max_active_runs=int(data.get("max_active_runs", 16)),
            max_active_tasks=int(data.get("max_active_tasks", 16)),
            tags=tuple(data.get("tags", ())),
            description=data.get("description", ""),
            tasks=tasks,
            spec_hash=data.get("spec_hash", ""),
            params_json=data.get("params_json", ""),
            callbacks=_callbacks(data.get("callbacks", ())),
            deadline_seconds=(
                None if data.get("deadline_seconds") is None else float(data["deadline_seconds"])
            ),
            **{k: data[k] for k in (*_POLICY_FIELDS, "asset_watchers") if k in data},
        )

    def compute_hash(self) -> str:
        """sha256 over the canonical JSON of the spec without its hash: stable across runs."""
        data = self.to_dict()
        data.pop("spec_hash", None)
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


_POLICY_FIELDS = (
    "overlap",
    "catchup_window_seconds",
    "max_runs",
    "jitter_seconds",
    "pause_on_failure",
    "dst_repeated",
    "dst_skipped",
    "dagrun_timeout_seconds",
    "asset_condition",
)


def _task_from_dict(task: dict[str, Any], seen: dict[Any, TaskSpec] | None) -> TaskSpec:
    """A TaskSpec from its dict; with ``seen``, one object for every equal task (the same
    JSON text; its repr, cheaper, tells the same values apart): a restore of 100,000 DAGs
    made from a few templates builds each task once and holds it once."""
    if seen is not None:  # by id first: a snapshot shares equal task dicts (spec_dicts), and
        # the restore holds them all, so no id is reused meanwhile
        known = seen.get(id(task)) or seen.get(repr(task))
        if known is not None:
            seen[id(task)] = known
            return known
    built = TaskSpec(
        **{
            **task,
            "env": tuple((str(k), str(v)) for k, v in task.get("env", ())),
            "upstream": tuple(task.get("upstream", ())),
            "trigger_rule": TriggerRule(task.get("trigger_rule", "all_success")),
            "callbacks": _callbacks(task.get("callbacks", ())),
            **{name: tuple(task[name]) for name in ("outlets", "inlets") if name in task},
        }
    )
    if seen is not None:
        seen[id(task)] = seen[repr(task)] = built
    return built


def _callbacks(items: Any) -> tuple[tuple[str, str, str], ...]:
    """TaskSpec/DagSpec.callbacks from their JSON form (lists)."""
    return tuple((str(e), str(ref), str(kw)) for e, ref, kw in items)


@dataclass(frozen=True, slots=True)
class ImportErrorRecord:
    """A DAG file that could not be loaded: shown under `dags errors`, kept until it parses."""

    fileloc: str
    message: str
    traceback: str = ""


@dataclass(frozen=True, slots=True, order=True)
class TaskKey:
    dag_id: str
    run_id: str
    task_id: str


@dataclass(frozen=True, slots=True)
class Lease:
    """A committed grant of one task attempt to one worker. ``token`` is the Raft log index of
    the command that granted it: strictly increasing, so a newer lease fences an older one."""

    key: TaskKey
    try_number: int
    worker_id: str
    token: int
    expires_at: datetime


@dataclass(slots=True)
class DagRun:
    dag_id: str
    run_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    run_type: RunType
    state: RunState = RunState.QUEUED
    conf: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None
    asset_events_json: str = added_field("")  # an asset-triggered run's events (JSON list)


@dataclass(slots=True)
class TaskInstance:
    """The live state of one task in one run. ``try_number`` counts attempts started so far
    (0 before the first lease); each attempt is one row in the DB's task_instance table."""

    key: TaskKey
    state: TaskState = TaskState.NONE
    try_number: int = 0
    max_tries: int = 1  # retries + 1; clear extends it
    lease: Lease | None = None
    next_retry_at: datetime | None = None
    queued_at: datetime | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None
    exit_code: int | None = None
    message: str = ""
    log_chunks: int = 0  # chunks appended to the current attempt (for their sequence numbers)
    # Worker and token of the current or last attempt, kept after its lease ends for its row
    worker_id: str | None = None
    lease_token: int | None = None
    # The attempt's return value (XCom) JSON; None: none (core/xcom.py, dropped by a clear)
    result_json: str | None = added_field(None)
    # A fired trigger's {"method", "kwargs", "event"} for the next lease (handlers_triggers)
    resume_json: str | None = added_field(None)
    map_count: int | None = added_field(None)  # an expanded mapped task's instances


class OutboxKind(StrEnum):
    """What an outbox entry asks the materializer to write. ``data`` layouts (datetimes iso):
    DAG            upsert dags: {dag_id, fileloc, spec, spec_hash, paused, active, updated_at}
    DAG_RUN        upsert dag_run by (dag_id, run_id): {dag_id, run_id, logical_date, conf,
                   data_interval_start/_end, run_type, state, created_at, start/end_date}
    TASK_INSTANCE  upsert task_instance by (dag_id, run_id, task_id, try_number): those, state,
                   worker_id, lease_token, queued_at, start/end_date, exit_code, message
    TASK_LOG       insert task_log: {dag_id, run_id, task_id, try_number, chunk_seq, stream,
                   text, created_at};  IMPORT_ERRORS: {errors: [{fileloc, message, ...}], ...}
    SECRET, CALLBACK_JOB, AUDIT, POOL  SecretRow, CallbackJobRow, AuditRow, handlers_pools;
    SKIPPED_SLOTS  upsert skipped_slots by (dag_id, last): {dag_id, first, last, count, reason,
                   at} (core/slot_policy.py; release 3 on); ASSET_*: below
    """

    DAG = "dag"
    DAG_RUN = "dag_run"
    TASK_INSTANCE = "task_instance"
    TASK_LOG = "task_log"
    IMPORT_ERRORS = "import_errors"
    SECRET = "secret"
    CALLBACK_JOB = "callback_job"
    AUDIT = "audit"
    SKIPPED_SLOTS = "skipped_slots"
    POOL = "pool"
    ASSET_EVENT = "asset_event"  # insert asset_event row: AssetEvent.to_dict() (§21)
    ASSET_RUN = "asset_run"  # insert asset_event_run rows: {dag_id, run_id, event_ids}


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    seq: int  # 1, 2, 3, ... without gaps across the cluster's whole life
    kind: OutboxKind
    data: dict[str, Any]  # JSON-able; layout per OutboxKind


@dataclass(frozen=True, slots=True)
class DagRecord:
    """A registered DAG as the replicated state knows it (``SchedulerState.dags``)."""

    spec: DagSpec
    paused: bool = False
    active: bool = True  # False once its file no longer defines it (history is kept)
    updated_at: datetime | None = None
    # The newest *scheduled* run's logical date: the schedule resumes after it (not manual runs)
    last_logical_date: datetime | None = None
    # Runs counted for max_runs, newest skipped ranges; from here on: digested/snapshotted if set
    scheduled_runs: int = 0
    skipped: tuple[Any, ...] = ()
    pause_note: str = ""  # why it is paused ("" when unpaused)
    gaps: tuple[Any, ...] = ()  # skip_causes.Gap: not parsed yet, paused (bounded)
    terms: tuple[Any, ...] = ()  # run_terms.TermStart: the terms that made its runs

    @property
    def dag_id(self) -> str:
        return self.spec.dag_id
