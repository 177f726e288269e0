import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Pool(_message.Message):
    __slots__ = ("name", "slots", "running_slots", "queued_tasks", "description", "updated_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_SLOTS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_TASKS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    slots: int
    running_slots: int
    queued_tasks: int
    description: str
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., slots: _Optional[int] = ..., running_slots: _Optional[int] = ..., queued_tasks: _Optional[int] = ..., description: _Optional[str] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListPoolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPoolsResponse(_message.Message):
    __slots__ = ("pools", "freshness")
    POOLS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    pools: _containers.RepeatedCompositeFieldContainer[Pool]
    freshness: _common_pb2.Freshness
    def __init__(self, pools: _Optional[_Iterable[_Union[Pool, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class SetPoolRequest(_message.Message):
    __slots__ = ("name", "slots", "description", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    slots: int
    description: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., slots: _Optional[int] = ..., description: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SetPoolResponse(_message.Message):
    __slots__ = ("changed", "freshness")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    freshness: _common_pb2.Freshness
    def __init__(self, changed: _Optional[bool] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class DeletePoolRequest(_message.Message):
    __slots__ = ("name", "request_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    request_id: str
    def __init__(self, name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeletePoolResponse(_message.Message):
    __slots__ = ("freshness",)
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    freshness: _common_pb2.Freshness
    def __init__(self, freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...
