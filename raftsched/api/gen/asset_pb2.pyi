import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EmitAssetEventRequest(_message.Message):
    __slots__ = ("uri", "extra_json", "event_id", "request_id")
    URI_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    uri: str
    extra_json: str
    event_id: str
    request_id: str
    def __init__(self, uri: _Optional[str] = ..., extra_json: _Optional[str] = ..., event_id: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class AssetRun(_message.Message):
    __slots__ = ("dag_id", "run_id")
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    dag_id: str
    run_id: str
    def __init__(self, dag_id: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class EmitAssetEventResponse(_message.Message):
    __slots__ = ("id", "runs", "duplicate", "freshness")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    id: int
    runs: _containers.RepeatedCompositeFieldContainer[AssetRun]
    duplicate: bool
    freshness: _common_pb2.Freshness
    def __init__(self, id: _Optional[int] = ..., runs: _Optional[_Iterable[_Union[AssetRun, _Mapping]]] = ..., duplicate: _Optional[bool] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class AssetEvent(_message.Message):
    __slots__ = ("id", "uri", "extra_json", "timestamp", "source_dag_id", "source_run_id", "source_task_id", "source_try", "event_id", "actor")
    ID_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SOURCE_DAG_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TRY_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    id: int
    uri: str
    extra_json: str
    timestamp: _timestamp_pb2.Timestamp
    source_dag_id: str
    source_run_id: str
    source_task_id: str
    source_try: int
    event_id: str
    actor: str
    def __init__(self, id: _Optional[int] = ..., uri: _Optional[str] = ..., extra_json: _Optional[str] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., source_dag_id: _Optional[str] = ..., source_run_id: _Optional[str] = ..., source_task_id: _Optional[str] = ..., source_try: _Optional[int] = ..., event_id: _Optional[str] = ..., actor: _Optional[str] = ...) -> None: ...

class AssetSummary(_message.Message):
    __slots__ = ("uri", "producers", "consumers", "event_count", "last_event", "queued_for", "watchers")
    URI_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    EVENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FOR_FIELD_NUMBER: _ClassVar[int]
    WATCHERS_FIELD_NUMBER: _ClassVar[int]
    uri: str
    producers: _containers.RepeatedScalarFieldContainer[str]
    consumers: _containers.RepeatedScalarFieldContainer[str]
    event_count: int
    last_event: AssetEvent
    queued_for: _containers.RepeatedScalarFieldContainer[str]
    watchers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, uri: _Optional[str] = ..., producers: _Optional[_Iterable[str]] = ..., consumers: _Optional[_Iterable[str]] = ..., event_count: _Optional[int] = ..., last_event: _Optional[_Union[AssetEvent, _Mapping]] = ..., queued_for: _Optional[_Iterable[str]] = ..., watchers: _Optional[_Iterable[str]] = ...) -> None: ...

class ListAssetsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAssetsResponse(_message.Message):
    __slots__ = ("assets", "freshness")
    ASSETS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    assets: _containers.RepeatedCompositeFieldContainer[AssetSummary]
    freshness: _common_pb2.Freshness
    def __init__(self, assets: _Optional[_Iterable[_Union[AssetSummary, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class GetAssetRequest(_message.Message):
    __slots__ = ("uri", "limit")
    URI_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    uri: str
    limit: int
    def __init__(self, uri: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class AssetDetail(_message.Message):
    __slots__ = ("summary", "events", "freshness")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    summary: AssetSummary
    events: _containers.RepeatedCompositeFieldContainer[AssetEvent]
    freshness: _common_pb2.Freshness
    def __init__(self, summary: _Optional[_Union[AssetSummary, _Mapping]] = ..., events: _Optional[_Iterable[_Union[AssetEvent, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...
