import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Schedule(_message.Message):
    __slots__ = ("kind", "cron", "interval_seconds", "display")
    KIND_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    cron: str
    interval_seconds: int
    display: str
    def __init__(self, kind: _Optional[str] = ..., cron: _Optional[str] = ..., interval_seconds: _Optional[int] = ..., display: _Optional[str] = ...) -> None: ...

class TaskDefinition(_message.Message):
    __slots__ = ("task_id", "kind", "command", "env", "callable_name", "kwargs_json", "retries", "retry_delay_seconds", "retry_exponential_backoff", "max_retry_delay_seconds", "execution_timeout_seconds", "priority_weight", "trigger_rule", "upstream", "queue", "outlets", "inlets", "pool", "pool_slots")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CALLABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RETRY_EXPONENTIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRY_DELAY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_RULE_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OUTLETS_FIELD_NUMBER: _ClassVar[int]
    INLETS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    POOL_SLOTS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    kind: str
    command: str
    env: _containers.ScalarMap[str, str]
    callable_name: str
    kwargs_json: str
    retries: int
    retry_delay_seconds: float
    retry_exponential_backoff: bool
    max_retry_delay_seconds: float
    execution_timeout_seconds: float
    priority_weight: int
    trigger_rule: str
    upstream: _containers.RepeatedScalarFieldContainer[str]
    queue: str
    outlets: _containers.RepeatedScalarFieldContainer[str]
    inlets: _containers.RepeatedScalarFieldContainer[str]
    pool: str
    pool_slots: int
    def __init__(self, task_id: _Optional[str] = ..., kind: _Optional[str] = ..., command: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., callable_name: _Optional[str] = ..., kwargs_json: _Optional[str] = ..., retries: _Optional[int] = ..., retry_delay_seconds: _Optional[float] = ..., retry_exponential_backoff: _Optional[bool] = ..., max_retry_delay_seconds: _Optional[float] = ..., execution_timeout_seconds: _Optional[float] = ..., priority_weight: _Optional[int] = ..., trigger_rule: _Optional[str] = ..., upstream: _Optional[_Iterable[str]] = ..., queue: _Optional[str] = ..., outlets: _Optional[_Iterable[str]] = ..., inlets: _Optional[_Iterable[str]] = ..., pool: _Optional[str] = ..., pool_slots: _Optional[int] = ...) -> None: ...

class RunSummary(_message.Message):
    __slots__ = ("run_id", "state", "logical_date", "run_type")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_DATE_FIELD_NUMBER: _ClassVar[int]
    RUN_TYPE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    state: _common_pb2.RunState
    logical_date: _timestamp_pb2.Timestamp
    run_type: _common_pb2.RunType
    def __init__(self, run_id: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.RunState, str]] = ..., logical_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_type: _Optional[_Union[_common_pb2.RunType, str]] = ...) -> None: ...

class NextRun(_message.Message):
    __slots__ = ("logical_date", "data_interval_start", "data_interval_end")
    LOGICAL_DATE_FIELD_NUMBER: _ClassVar[int]
    DATA_INTERVAL_START_FIELD_NUMBER: _ClassVar[int]
    DATA_INTERVAL_END_FIELD_NUMBER: _ClassVar[int]
    logical_date: _timestamp_pb2.Timestamp
    data_interval_start: _timestamp_pb2.Timestamp
    data_interval_end: _timestamp_pb2.Timestamp
    def __init__(self, logical_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data_interval_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data_interval_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Dag(_message.Message):
    __slots__ = ("dag_id", "fileloc", "description", "tags", "schedule", "timezone", "start_date", "end_date", "catchup", "max_active_runs", "max_active_tasks", "paused", "active", "spec_hash", "updated_at", "last_logical_date", "next_run", "recent_runs", "task_count", "params_json", "overlap", "catchup_window_seconds", "max_runs", "scheduled_runs", "jitter_seconds", "pause_on_failure", "pause_note", "skipped", "asset_condition")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    FILELOC_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    START_DATE_FIELD_NUMBER: _ClassVar[int]
    END_DATE_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_TASKS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    SPEC_HASH_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_LOGICAL_DATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_RUN_FIELD_NUMBER: _ClassVar[int]
    RECENT_RUNS_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    CATCHUP_WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_RUNS_FIELD_NUMBER: _ClassVar[int]
    JITTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PAUSE_ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    PAUSE_NOTE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    ASSET_CONDITION_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    fileloc: str
    description: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    schedule: Schedule
    timezone: str
    start_date: _timestamp_pb2.Timestamp
    end_date: _timestamp_pb2.Timestamp
    catchup: bool
    max_active_runs: int
    max_active_tasks: int
    paused: bool
    active: bool
    spec_hash: str
    updated_at: _timestamp_pb2.Timestamp
    last_logical_date: _timestamp_pb2.Timestamp
    next_run: NextRun
    recent_runs: _containers.RepeatedCompositeFieldContainer[RunSummary]
    task_count: int
    params_json: str
    overlap: str
    catchup_window_seconds: float
    max_runs: int
    scheduled_runs: int
    jitter_seconds: float
    pause_on_failure: bool
    pause_note: str
    skipped: _containers.RepeatedCompositeFieldContainer[SkippedSlots]
    asset_condition: str
    def __init__(self, dag_id: _Optional[str] = ..., fileloc: _Optional[str] = ..., description: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., schedule: _Optional[_Union[Schedule, _Mapping]] = ..., timezone: _Optional[str] = ..., start_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., catchup: _Optional[bool] = ..., max_active_runs: _Optional[int] = ..., max_active_tasks: _Optional[int] = ..., paused: _Optional[bool] = ..., active: _Optional[bool] = ..., spec_hash: _Optional[str] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_logical_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_run: _Optional[_Union[NextRun, _Mapping]] = ..., recent_runs: _Optional[_Iterable[_Union[RunSummary, _Mapping]]] = ..., task_count: _Optional[int] = ..., params_json: _Optional[str] = ..., overlap: _Optional[str] = ..., catchup_window_seconds: _Optional[float] = ..., max_runs: _Optional[int] = ..., scheduled_runs: _Optional[int] = ..., jitter_seconds: _Optional[float] = ..., pause_on_failure: _Optional[bool] = ..., pause_note: _Optional[str] = ..., skipped: _Optional[_Iterable[_Union[SkippedSlots, _Mapping]]] = ..., asset_condition: _Optional[str] = ...) -> None: ...

class SkippedSlots(_message.Message):
    __slots__ = ("first", "last", "count", "reason", "decided_at")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    first: _timestamp_pb2.Timestamp
    last: _timestamp_pb2.Timestamp
    count: int
    reason: str
    decided_at: _timestamp_pb2.Timestamp
    def __init__(self, first: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., count: _Optional[int] = ..., reason: _Optional[str] = ..., decided_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListDagsRequest(_message.Message):
    __slots__ = ("search", "tags", "paused", "include_inactive", "recent_runs", "page_size", "page_token")
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INACTIVE_FIELD_NUMBER: _ClassVar[int]
    RECENT_RUNS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    search: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    paused: bool
    include_inactive: bool
    recent_runs: int
    page_size: int
    page_token: str
    def __init__(self, search: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., paused: _Optional[bool] = ..., include_inactive: _Optional[bool] = ..., recent_runs: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDagsResponse(_message.Message):
    __slots__ = ("dags", "next_page_token", "total_size", "freshness")
    DAGS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    dags: _containers.RepeatedCompositeFieldContainer[Dag]
    next_page_token: str
    total_size: int
    freshness: _common_pb2.Freshness
    def __init__(self, dags: _Optional[_Iterable[_Union[Dag, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total_size: _Optional[int] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class GetDagRequest(_message.Message):
    __slots__ = ("dag_id",)
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    def __init__(self, dag_id: _Optional[str] = ...) -> None: ...

class GetDagResponse(_message.Message):
    __slots__ = ("dag", "tasks", "freshness")
    DAG_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    dag: Dag
    tasks: _containers.RepeatedCompositeFieldContainer[TaskDefinition]
    freshness: _common_pb2.Freshness
    def __init__(self, dag: _Optional[_Union[Dag, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskDefinition, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class ExplainSlotRequest(_message.Message):
    __slots__ = ("dag_id", "at")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    at: _timestamp_pb2.Timestamp
    def __init__(self, dag_id: _Optional[str] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ExplainSlotResponse(_message.Message):
    __slots__ = ("verdict", "detail", "slot", "run_id", "history_from", "freshness")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FROM_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    verdict: str
    detail: str
    slot: _timestamp_pb2.Timestamp
    run_id: str
    history_from: _timestamp_pb2.Timestamp
    freshness: _common_pb2.Freshness
    def __init__(self, verdict: _Optional[str] = ..., detail: _Optional[str] = ..., slot: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_id: _Optional[str] = ..., history_from: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class PauseDagRequest(_message.Message):
    __slots__ = ("dag_id", "request_id", "note")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    request_id: str
    note: str
    def __init__(self, dag_id: _Optional[str] = ..., request_id: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class UnpauseDagRequest(_message.Message):
    __slots__ = ("dag_id", "request_id")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    request_id: str
    def __init__(self, dag_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class PauseDagResponse(_message.Message):
    __slots__ = ("dag", "changed", "freshness")
    DAG_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    dag: Dag
    changed: bool
    freshness: _common_pb2.Freshness
    def __init__(self, dag: _Optional[_Union[Dag, _Mapping]] = ..., changed: _Optional[bool] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class TriggerDagRequest(_message.Message):
    __slots__ = ("dag_id", "conf_json", "logical_date", "run_id", "request_id")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    CONF_JSON_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_DATE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    conf_json: str
    logical_date: _timestamp_pb2.Timestamp
    run_id: str
    request_id: str
    def __init__(self, dag_id: _Optional[str] = ..., conf_json: _Optional[str] = ..., logical_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class TriggerDagResponse(_message.Message):
    __slots__ = ("run", "freshness")
    RUN_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    run: DagRun
    freshness: _common_pb2.Freshness
    def __init__(self, run: _Optional[_Union[DagRun, _Mapping]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class BackfillDagRequest(_message.Message):
    __slots__ = ("dag_id", "start_date", "end_date", "conf_json", "dry_run", "request_id")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    START_DATE_FIELD_NUMBER: _ClassVar[int]
    END_DATE_FIELD_NUMBER: _ClassVar[int]
    CONF_JSON_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    start_date: _timestamp_pb2.Timestamp
    end_date: _timestamp_pb2.Timestamp
    conf_json: str
    dry_run: bool
    request_id: str
    def __init__(self, dag_id: _Optional[str] = ..., start_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., conf_json: _Optional[str] = ..., dry_run: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class BackfillDagResponse(_message.Message):
    __slots__ = ("runs", "skipped", "freshness")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[DagRun]
    skipped: _containers.RepeatedCompositeFieldContainer[_timestamp_pb2.Timestamp]
    freshness: _common_pb2.Freshness
    def __init__(self, runs: _Optional[_Iterable[_Union[DagRun, _Mapping]]] = ..., skipped: _Optional[_Iterable[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class DagRun(_message.Message):
    __slots__ = ("dag_id", "run_id", "logical_date", "data_interval_start", "data_interval_end", "run_type", "state", "conf_json", "created_at", "start_date", "end_date", "asset_events_json")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_DATE_FIELD_NUMBER: _ClassVar[int]
    DATA_INTERVAL_START_FIELD_NUMBER: _ClassVar[int]
    DATA_INTERVAL_END_FIELD_NUMBER: _ClassVar[int]
    RUN_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONF_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    START_DATE_FIELD_NUMBER: _ClassVar[int]
    END_DATE_FIELD_NUMBER: _ClassVar[int]
    ASSET_EVENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    run_id: str
    logical_date: _timestamp_pb2.Timestamp
    data_interval_start: _timestamp_pb2.Timestamp
    data_interval_end: _timestamp_pb2.Timestamp
    run_type: _common_pb2.RunType
    state: _common_pb2.RunState
    conf_json: str
    created_at: _timestamp_pb2.Timestamp
    start_date: _timestamp_pb2.Timestamp
    end_date: _timestamp_pb2.Timestamp
    asset_events_json: str
    def __init__(self, dag_id: _Optional[str] = ..., run_id: _Optional[str] = ..., logical_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data_interval_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data_interval_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_type: _Optional[_Union[_common_pb2.RunType, str]] = ..., state: _Optional[_Union[_common_pb2.RunState, str]] = ..., conf_json: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., asset_events_json: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("dag_id", "states", "run_type", "page_size", "page_token")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    RUN_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    states: _containers.RepeatedScalarFieldContainer[_common_pb2.RunState]
    run_type: _common_pb2.RunType
    page_size: int
    page_token: str
    def __init__(self, dag_id: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_common_pb2.RunState, str]]] = ..., run_type: _Optional[_Union[_common_pb2.RunType, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token", "freshness")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[DagRun]
    next_page_token: str
    freshness: _common_pb2.Freshness
    def __init__(self, runs: _Optional[_Iterable[_Union[DagRun, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class TaskInstance(_message.Message):
    __slots__ = ("key", "state", "try_number", "max_tries", "worker_id", "lease_token", "queued_at", "start_date", "end_date", "next_retry_at", "exit_code", "message", "lease_expires_at", "result_json", "queue", "waiting", "map_index", "map_count")
    KEY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRY_NUMBER_FIELD_NUMBER: _ClassVar[int]
    MAX_TRIES_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    QUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    START_DATE_FIELD_NUMBER: _ClassVar[int]
    END_DATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_RETRY_AT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    MAP_INDEX_FIELD_NUMBER: _ClassVar[int]
    MAP_COUNT_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.TaskKey
    state: _common_pb2.TaskState
    try_number: int
    max_tries: int
    worker_id: str
    lease_token: int
    queued_at: _timestamp_pb2.Timestamp
    start_date: _timestamp_pb2.Timestamp
    end_date: _timestamp_pb2.Timestamp
    next_retry_at: _timestamp_pb2.Timestamp
    exit_code: int
    message: str
    lease_expires_at: _timestamp_pb2.Timestamp
    result_json: str
    queue: str
    waiting: str
    map_index: int
    map_count: int
    def __init__(self, key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., try_number: _Optional[int] = ..., max_tries: _Optional[int] = ..., worker_id: _Optional[str] = ..., lease_token: _Optional[int] = ..., queued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_retry_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., exit_code: _Optional[int] = ..., message: _Optional[str] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., result_json: _Optional[str] = ..., queue: _Optional[str] = ..., waiting: _Optional[str] = ..., map_index: _Optional[int] = ..., map_count: _Optional[int] = ...) -> None: ...

class ListTaskInstancesRequest(_message.Message):
    __slots__ = ("dag_id", "run_id")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    run_id: str
    def __init__(self, dag_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class ListTaskInstancesResponse(_message.Message):
    __slots__ = ("run", "task_instances", "freshness")
    RUN_FIELD_NUMBER: _ClassVar[int]
    TASK_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    run: DagRun
    task_instances: _containers.RepeatedCompositeFieldContainer[TaskInstance]
    freshness: _common_pb2.Freshness
    def __init__(self, run: _Optional[_Union[DagRun, _Mapping]] = ..., task_instances: _Optional[_Iterable[_Union[TaskInstance, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class ClearTasksRequest(_message.Message):
    __slots__ = ("dag_id", "run_id", "task_ids", "include_downstream", "request_id")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_DOWNSTREAM_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    run_id: str
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    include_downstream: bool
    request_id: str
    def __init__(self, dag_id: _Optional[str] = ..., run_id: _Optional[str] = ..., task_ids: _Optional[_Iterable[str]] = ..., include_downstream: _Optional[bool] = ..., request_id: _Optional[str] = ...) -> None: ...

class ClearTasksResponse(_message.Message):
    __slots__ = ("cleared_task_ids", "freshness")
    CLEARED_TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    cleared_task_ids: _containers.RepeatedScalarFieldContainer[str]
    freshness: _common_pb2.Freshness
    def __init__(self, cleared_task_ids: _Optional[_Iterable[str]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class MarkTasksRequest(_message.Message):
    __slots__ = ("dag_id", "run_id", "task_ids", "state", "request_id")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    run_id: str
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    state: _common_pb2.TaskState
    request_id: str
    def __init__(self, dag_id: _Optional[str] = ..., run_id: _Optional[str] = ..., task_ids: _Optional[_Iterable[str]] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class MarkTasksResponse(_message.Message):
    __slots__ = ("marked_task_ids", "freshness")
    MARKED_TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    marked_task_ids: _containers.RepeatedScalarFieldContainer[str]
    freshness: _common_pb2.Freshness
    def __init__(self, marked_task_ids: _Optional[_Iterable[str]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class GetTaskLogRequest(_message.Message):
    __slots__ = ("dag_id", "run_id", "task_id", "try_number", "after_seq", "follow")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TRY_NUMBER_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    after_seq: int
    follow: bool
    def __init__(self, dag_id: _Optional[str] = ..., run_id: _Optional[str] = ..., task_id: _Optional[str] = ..., try_number: _Optional[int] = ..., after_seq: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class ListImportErrorsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DagImportError(_message.Message):
    __slots__ = ("fileloc", "message", "traceback")
    FILELOC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    fileloc: str
    message: str
    traceback: str
    def __init__(self, fileloc: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ...) -> None: ...

class GetDagSourceRequest(_message.Message):
    __slots__ = ("dag_id",)
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    def __init__(self, dag_id: _Optional[str] = ...) -> None: ...

class GetDagSourceResponse(_message.Message):
    __slots__ = ("fileloc", "source", "truncated", "size_bytes", "max_bytes", "spec_hash", "file_modified", "parsed_at", "error", "freshness")
    FILELOC_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    SPEC_HASH_FIELD_NUMBER: _ClassVar[int]
    FILE_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    PARSED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    fileloc: str
    source: str
    truncated: bool
    size_bytes: int
    max_bytes: int
    spec_hash: str
    file_modified: _timestamp_pb2.Timestamp
    parsed_at: _timestamp_pb2.Timestamp
    error: str
    freshness: _common_pb2.Freshness
    def __init__(self, fileloc: _Optional[str] = ..., source: _Optional[str] = ..., truncated: _Optional[bool] = ..., size_bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., spec_hash: _Optional[str] = ..., file_modified: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., parsed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[str] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class ListImportErrorsResponse(_message.Message):
    __slots__ = ("import_errors", "freshness")
    IMPORT_ERRORS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    import_errors: _containers.RepeatedCompositeFieldContainer[DagImportError]
    freshness: _common_pb2.Freshness
    def __init__(self, import_errors: _Optional[_Iterable[_Union[DagImportError, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...
