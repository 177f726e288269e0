import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_TYPE_UNSPECIFIED: _ClassVar[RunType]
    RUN_TYPE_SCHEDULED: _ClassVar[RunType]
    RUN_TYPE_MANUAL: _ClassVar[RunType]
    RUN_TYPE_ASSET_TRIGGERED: _ClassVar[RunType]

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_QUEUED: _ClassVar[RunState]
    RUN_STATE_RUNNING: _ClassVar[RunState]
    RUN_STATE_SUCCESS: _ClassVar[RunState]
    RUN_STATE_FAILED: _ClassVar[RunState]

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_NONE: _ClassVar[TaskState]
    TASK_STATE_QUEUED: _ClassVar[TaskState]
    TASK_STATE_RUNNING: _ClassVar[TaskState]
    TASK_STATE_SUCCESS: _ClassVar[TaskState]
    TASK_STATE_FAILED: _ClassVar[TaskState]
    TASK_STATE_UP_FOR_RETRY: _ClassVar[TaskState]
    TASK_STATE_UPSTREAM_FAILED: _ClassVar[TaskState]
    TASK_STATE_SKIPPED: _ClassVar[TaskState]
    TASK_STATE_DEFERRED: _ClassVar[TaskState]
RUN_TYPE_UNSPECIFIED: RunType
RUN_TYPE_SCHEDULED: RunType
RUN_TYPE_MANUAL: RunType
RUN_TYPE_ASSET_TRIGGERED: RunType
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_QUEUED: RunState
RUN_STATE_RUNNING: RunState
RUN_STATE_SUCCESS: RunState
RUN_STATE_FAILED: RunState
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_NONE: TaskState
TASK_STATE_QUEUED: TaskState
TASK_STATE_RUNNING: TaskState
TASK_STATE_SUCCESS: TaskState
TASK_STATE_FAILED: TaskState
TASK_STATE_UP_FOR_RETRY: TaskState
TASK_STATE_UPSTREAM_FAILED: TaskState
TASK_STATE_SKIPPED: TaskState
TASK_STATE_DEFERRED: TaskState

class Freshness(_message.Message):
    __slots__ = ("leader_id", "applied_index", "node_id")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    leader_id: str
    applied_index: int
    node_id: str
    def __init__(self, leader_id: _Optional[str] = ..., applied_index: _Optional[int] = ..., node_id: _Optional[str] = ...) -> None: ...

class TaskKey(_message.Message):
    __slots__ = ("dag_id", "run_id", "task_id")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    run_id: str
    task_id: str
    def __init__(self, dag_id: _Optional[str] = ..., run_id: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class LogText(_message.Message):
    __slots__ = ("stream", "text")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    stream: str
    text: str
    def __init__(self, stream: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("seq", "try_number", "stream", "text", "created_at")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TRY_NUMBER_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    try_number: int
    stream: str
    text: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, seq: _Optional[int] = ..., try_number: _Optional[int] = ..., stream: _Optional[str] = ..., text: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
