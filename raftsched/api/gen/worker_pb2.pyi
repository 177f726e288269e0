import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerInfo(_message.Message):
    __slots__ = ("host", "pid", "version", "slots")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    host: str
    pid: int
    version: str
    slots: int
    def __init__(self, host: _Optional[str] = ..., pid: _Optional[int] = ..., version: _Optional[str] = ..., slots: _Optional[int] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("worker_id", "max_tasks", "wait_seconds", "lease_ttl_seconds", "request_id", "queues", "info")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    max_tasks: int
    wait_seconds: float
    lease_ttl_seconds: float
    request_id: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    info: WorkerInfo
    def __init__(self, worker_id: _Optional[str] = ..., max_tasks: _Optional[int] = ..., wait_seconds: _Optional[float] = ..., lease_ttl_seconds: _Optional[float] = ..., request_id: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., info: _Optional[_Union[WorkerInfo, _Mapping]] = ...) -> None: ...

class TaskLease(_message.Message):
    __slots__ = ("key", "token", "try_number", "max_tries", "expires_at", "kind", "command", "env", "callable_name", "kwargs_json", "fileloc", "execution_timeout_seconds", "logical_date", "data_interval_start", "data_interval_end", "conf_json", "params_json", "upstream_results", "skip_on_exit_code", "resume_json", "asset_events_json")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class UpstreamResultsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TRY_NUMBER_FIELD_NUMBER: _ClassVar[int]
    MAX_TRIES_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    CALLABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    FILELOC_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_DATE_FIELD_NUMBER: _ClassVar[int]
    DATA_INTERVAL_START_FIELD_NUMBER: _ClassVar[int]
    DATA_INTERVAL_END_FIELD_NUMBER: _ClassVar[int]
    CONF_JSON_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_RESULTS_FIELD_NUMBER: _ClassVar[int]
    SKIP_ON_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RESUME_JSON_FIELD_NUMBER: _ClassVar[int]
    ASSET_EVENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.TaskKey
    token: int
    try_number: int
    max_tries: int
    expires_at: _timestamp_pb2.Timestamp
    kind: str
    command: str
    env: _containers.ScalarMap[str, str]
    callable_name: str
    kwargs_json: str
    fileloc: str
    execution_timeout_seconds: float
    logical_date: _timestamp_pb2.Timestamp
    data_interval_start: _timestamp_pb2.Timestamp
    data_interval_end: _timestamp_pb2.Timestamp
    conf_json: str
    params_json: str
    upstream_results: _containers.ScalarMap[str, str]
    skip_on_exit_code: int
    resume_json: str
    asset_events_json: str
    def __init__(self, key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., token: _Optional[int] = ..., try_number: _Optional[int] = ..., max_tries: _Optional[int] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[str] = ..., command: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., callable_name: _Optional[str] = ..., kwargs_json: _Optional[str] = ..., fileloc: _Optional[str] = ..., execution_timeout_seconds: _Optional[float] = ..., logical_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data_interval_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data_interval_end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., conf_json: _Optional[str] = ..., params_json: _Optional[str] = ..., upstream_results: _Optional[_Mapping[str, str]] = ..., skip_on_exit_code: _Optional[int] = ..., resume_json: _Optional[str] = ..., asset_events_json: _Optional[str] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[TaskLease]
    def __init__(self, leases: _Optional[_Iterable[_Union[TaskLease, _Mapping]]] = ...) -> None: ...

class LeaseRef(_message.Message):
    __slots__ = ("key", "token")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.TaskKey
    token: int
    def __init__(self, key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., token: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "leases", "lease_ttl_seconds", "request_id", "queues", "info")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    lease_ttl_seconds: float
    request_id: str
    queues: _containers.RepeatedScalarFieldContainer[str]
    info: WorkerInfo
    def __init__(self, worker_id: _Optional[str] = ..., leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., lease_ttl_seconds: _Optional[float] = ..., request_id: _Optional[str] = ..., queues: _Optional[_Iterable[str]] = ..., info: _Optional[_Union[WorkerInfo, _Mapping]] = ...) -> None: ...

class LeaseStatus(_message.Message):
    __slots__ = ("lease", "ok", "reason", "expires_at")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    lease: LeaseRef
    ok: bool
    reason: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, lease: _Optional[_Union[LeaseRef, _Mapping]] = ..., ok: _Optional[bool] = ..., reason: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseStatus]
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseStatus, _Mapping]]] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("worker_id", "key", "token", "success", "exit_code", "message", "chunks", "request_id", "result_json", "is_branch", "follow", "skipped", "outlet_extras")
    class OutletExtrasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    IS_BRANCH_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    OUTLET_EXTRAS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    key: _common_pb2.TaskKey
    token: int
    success: bool
    exit_code: int
    message: str
    chunks: _containers.RepeatedCompositeFieldContainer[_common_pb2.LogText]
    request_id: str
    result_json: str
    is_branch: bool
    follow: _containers.RepeatedScalarFieldContainer[str]
    skipped: bool
    outlet_extras: _containers.ScalarMap[str, str]
    def __init__(self, worker_id: _Optional[str] = ..., key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., token: _Optional[int] = ..., success: _Optional[bool] = ..., exit_code: _Optional[int] = ..., message: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[_common_pb2.LogText, _Mapping]]] = ..., request_id: _Optional[str] = ..., result_json: _Optional[str] = ..., is_branch: _Optional[bool] = ..., follow: _Optional[_Iterable[str]] = ..., skipped: _Optional[bool] = ..., outlet_extras: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.TaskState
    def __init__(self, state: _Optional[_Union[_common_pb2.TaskState, str]] = ...) -> None: ...

class CompleteBatchRequest(_message.Message):
    __slots__ = ("worker_id", "outcomes", "request_id", "next")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    outcomes: _containers.RepeatedCompositeFieldContainer[CompleteRequest]
    request_id: str
    next: LeaseRequest
    def __init__(self, worker_id: _Optional[str] = ..., outcomes: _Optional[_Iterable[_Union[CompleteRequest, _Mapping]]] = ..., request_id: _Optional[str] = ..., next: _Optional[_Union[LeaseRequest, _Mapping]] = ...) -> None: ...

class CompleteAnswer(_message.Message):
    __slots__ = ("code", "message", "state")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    state: _common_pb2.TaskState
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ...) -> None: ...

class CompleteBatchResponse(_message.Message):
    __slots__ = ("answers", "leases")
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[CompleteAnswer]
    leases: _containers.RepeatedCompositeFieldContainer[TaskLease]
    def __init__(self, answers: _Optional[_Iterable[_Union[CompleteAnswer, _Mapping]]] = ..., leases: _Optional[_Iterable[_Union[TaskLease, _Mapping]]] = ...) -> None: ...

class AppendLogsRequest(_message.Message):
    __slots__ = ("worker_id", "key", "token", "chunks", "request_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    key: _common_pb2.TaskKey
    token: int
    chunks: _containers.RepeatedCompositeFieldContainer[_common_pb2.LogText]
    request_id: str
    def __init__(self, worker_id: _Optional[str] = ..., key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., token: _Optional[int] = ..., chunks: _Optional[_Iterable[_Union[_common_pb2.LogText, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class AppendLogsResponse(_message.Message):
    __slots__ = ("last_seq",)
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    last_seq: int
    def __init__(self, last_seq: _Optional[int] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("worker_id", "leases", "request_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    request_id: str
    def __init__(self, worker_id: _Optional[str] = ..., leases: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: _containers.RepeatedCompositeFieldContainer[LeaseRef]
    def __init__(self, released: _Optional[_Iterable[_Union[LeaseRef, _Mapping]]] = ...) -> None: ...

class LeaseCallbacksRequest(_message.Message):
    __slots__ = ("worker_id", "max_jobs", "wait_seconds", "lease_ttl_seconds", "request_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_JOBS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    max_jobs: int
    wait_seconds: float
    lease_ttl_seconds: float
    request_id: str
    def __init__(self, worker_id: _Optional[str] = ..., max_jobs: _Optional[int] = ..., wait_seconds: _Optional[float] = ..., lease_ttl_seconds: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...

class CallbackLease(_message.Message):
    __slots__ = ("job_id", "token", "key", "try_number", "event", "callable", "kwargs_json", "fileloc", "context_json", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TRY_NUMBER_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    CALLABLE_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    FILELOC_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    token: int
    key: _common_pb2.TaskKey
    try_number: int
    event: str
    callable: str
    kwargs_json: str
    fileloc: str
    context_json: str
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., token: _Optional[int] = ..., key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., try_number: _Optional[int] = ..., event: _Optional[str] = ..., callable: _Optional[str] = ..., kwargs_json: _Optional[str] = ..., fileloc: _Optional[str] = ..., context_json: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class LeaseCallbacksResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[CallbackLease]
    def __init__(self, jobs: _Optional[_Iterable[_Union[CallbackLease, _Mapping]]] = ...) -> None: ...

class CompleteCallbackRequest(_message.Message):
    __slots__ = ("worker_id", "job_id", "token", "success", "message", "chunks", "request_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    job_id: str
    token: int
    success: bool
    message: str
    chunks: _containers.RepeatedCompositeFieldContainer[_common_pb2.LogText]
    request_id: str
    def __init__(self, worker_id: _Optional[str] = ..., job_id: _Optional[str] = ..., token: _Optional[int] = ..., success: _Optional[bool] = ..., message: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[_common_pb2.LogText, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CompleteCallbackResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: str
    def __init__(self, state: _Optional[str] = ...) -> None: ...

class SignOffRequest(_message.Message):
    __slots__ = ("worker_id", "reason", "info")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    reason: str
    info: WorkerInfo
    def __init__(self, worker_id: _Optional[str] = ..., reason: _Optional[str] = ..., info: _Optional[_Union[WorkerInfo, _Mapping]] = ...) -> None: ...

class SignOffResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WorkerAttempt(_message.Message):
    __slots__ = ("key", "try_number", "start_date")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TRY_NUMBER_FIELD_NUMBER: _ClassVar[int]
    START_DATE_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.TaskKey
    try_number: int
    start_date: _timestamp_pb2.Timestamp
    def __init__(self, key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., try_number: _Optional[int] = ..., start_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WorkerSummary(_message.Message):
    __slots__ = ("worker_id", "info", "queues", "running", "last_seen", "lost_at", "lost_reason")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    LOST_AT_FIELD_NUMBER: _ClassVar[int]
    LOST_REASON_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    info: WorkerInfo
    queues: _containers.RepeatedScalarFieldContainer[str]
    running: _containers.RepeatedCompositeFieldContainer[WorkerAttempt]
    last_seen: _timestamp_pb2.Timestamp
    lost_at: _timestamp_pb2.Timestamp
    lost_reason: str
    def __init__(self, worker_id: _Optional[str] = ..., info: _Optional[_Union[WorkerInfo, _Mapping]] = ..., queues: _Optional[_Iterable[str]] = ..., running: _Optional[_Iterable[_Union[WorkerAttempt, _Mapping]]] = ..., last_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lost_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lost_reason: _Optional[str] = ...) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers", "lost", "freshness")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerSummary]
    lost: _containers.RepeatedCompositeFieldContainer[WorkerSummary]
    freshness: _common_pb2.Freshness
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerSummary, _Mapping]]] = ..., lost: _Optional[_Iterable[_Union[WorkerSummary, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class DeferRequest(_message.Message):
    __slots__ = ("worker_id", "key", "token", "kind", "args_json", "method_name", "kwargs_json", "timeout_seconds", "chunks", "request_id")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    METHOD_NAME_FIELD_NUMBER: _ClassVar[int]
    KWARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    key: _common_pb2.TaskKey
    token: int
    kind: str
    args_json: str
    method_name: str
    kwargs_json: str
    timeout_seconds: float
    chunks: _containers.RepeatedCompositeFieldContainer[_common_pb2.LogText]
    request_id: str
    def __init__(self, worker_id: _Optional[str] = ..., key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., token: _Optional[int] = ..., kind: _Optional[str] = ..., args_json: _Optional[str] = ..., method_name: _Optional[str] = ..., kwargs_json: _Optional[str] = ..., timeout_seconds: _Optional[float] = ..., chunks: _Optional[_Iterable[_Union[_common_pb2.LogText, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeferResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: str
    def __init__(self, state: _Optional[str] = ...) -> None: ...

class LeaseTriggersRequest(_message.Message):
    __slots__ = ("triggerer_id", "max_triggers", "wait_seconds", "lease_ttl_seconds", "request_id")
    TRIGGERER_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_TRIGGERS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    triggerer_id: str
    max_triggers: int
    wait_seconds: float
    lease_ttl_seconds: float
    request_id: str
    def __init__(self, triggerer_id: _Optional[str] = ..., max_triggers: _Optional[int] = ..., wait_seconds: _Optional[float] = ..., lease_ttl_seconds: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...

class TriggerLease(_message.Message):
    __slots__ = ("key", "token", "try_number", "kind", "args_json", "fileloc", "expires_at")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TRY_NUMBER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    FILELOC_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.TaskKey
    token: int
    try_number: int
    kind: str
    args_json: str
    fileloc: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., token: _Optional[int] = ..., try_number: _Optional[int] = ..., kind: _Optional[str] = ..., args_json: _Optional[str] = ..., fileloc: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LeaseTriggersResponse(_message.Message):
    __slots__ = ("triggers",)
    TRIGGERS_FIELD_NUMBER: _ClassVar[int]
    triggers: _containers.RepeatedCompositeFieldContainer[TriggerLease]
    def __init__(self, triggers: _Optional[_Iterable[_Union[TriggerLease, _Mapping]]] = ...) -> None: ...

class TriggerRef(_message.Message):
    __slots__ = ("key", "token")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.TaskKey
    token: int
    def __init__(self, key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., token: _Optional[int] = ...) -> None: ...

class HeartbeatTriggersRequest(_message.Message):
    __slots__ = ("triggerer_id", "triggers", "lease_ttl_seconds", "request_id")
    TRIGGERER_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGERS_FIELD_NUMBER: _ClassVar[int]
    LEASE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    triggerer_id: str
    triggers: _containers.RepeatedCompositeFieldContainer[TriggerRef]
    lease_ttl_seconds: float
    request_id: str
    def __init__(self, triggerer_id: _Optional[str] = ..., triggers: _Optional[_Iterable[_Union[TriggerRef, _Mapping]]] = ..., lease_ttl_seconds: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...

class HeartbeatTriggersResponse(_message.Message):
    __slots__ = ("ok",)
    OK_FIELD_NUMBER: _ClassVar[int]
    ok: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, ok: _Optional[_Iterable[bool]] = ...) -> None: ...

class TriggerFiring(_message.Message):
    __slots__ = ("ref", "event_json", "error")
    REF_FIELD_NUMBER: _ClassVar[int]
    EVENT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ref: TriggerRef
    event_json: str
    error: str
    def __init__(self, ref: _Optional[_Union[TriggerRef, _Mapping]] = ..., event_json: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class FireTriggersRequest(_message.Message):
    __slots__ = ("triggerer_id", "firings", "request_id")
    TRIGGERER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRINGS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    triggerer_id: str
    firings: _containers.RepeatedCompositeFieldContainer[TriggerFiring]
    request_id: str
    def __init__(self, triggerer_id: _Optional[str] = ..., firings: _Optional[_Iterable[_Union[TriggerFiring, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class FireTriggersResponse(_message.Message):
    __slots__ = ("refused",)
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    refused: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, refused: _Optional[_Iterable[str]] = ...) -> None: ...

class ExternalRunStateRequest(_message.Message):
    __slots__ = ("triggerer_id", "ref", "dag_id", "logical_date", "task_ids")
    TRIGGERER_ID_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_DATE_FIELD_NUMBER: _ClassVar[int]
    TASK_IDS_FIELD_NUMBER: _ClassVar[int]
    triggerer_id: str
    ref: TriggerRef
    dag_id: str
    logical_date: _timestamp_pb2.Timestamp
    task_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, triggerer_id: _Optional[str] = ..., ref: _Optional[_Union[TriggerRef, _Mapping]] = ..., dag_id: _Optional[str] = ..., logical_date: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., task_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ExternalRunStateResponse(_message.Message):
    __slots__ = ("found", "run_state", "task_states")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    RUN_STATE_FIELD_NUMBER: _ClassVar[int]
    TASK_STATES_FIELD_NUMBER: _ClassVar[int]
    found: bool
    run_state: str
    task_states: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, found: _Optional[bool] = ..., run_state: _Optional[str] = ..., task_states: _Optional[_Iterable[str]] = ...) -> None: ...
