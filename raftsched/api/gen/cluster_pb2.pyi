import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_ROLE_UNSPECIFIED: _ClassVar[NodeRole]
    NODE_ROLE_LEADER: _ClassVar[NodeRole]
    NODE_ROLE_FOLLOWER: _ClassVar[NodeRole]
    NODE_ROLE_CANDIDATE: _ClassVar[NodeRole]
    NODE_ROLE_UNREACHABLE: _ClassVar[NodeRole]
NODE_ROLE_UNSPECIFIED: NodeRole
NODE_ROLE_LEADER: NodeRole
NODE_ROLE_FOLLOWER: NodeRole
NODE_ROLE_CANDIDATE: NodeRole
NODE_ROLE_UNREACHABLE: NodeRole

class GetStatusRequest(_message.Message):
    __slots__ = ("local_only", "with_history")
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    WITH_HISTORY_FIELD_NUMBER: _ClassVar[int]
    local_only: bool
    with_history: bool
    def __init__(self, local_only: _Optional[bool] = ..., with_history: _Optional[bool] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("node_id", "address", "api_address", "role", "term", "commit_index", "applied_index", "lag", "digest", "digest_index", "outbox_backlog", "outbox_last_seq", "outbox_acked_seq", "db_watermark", "db_ok", "backpressure", "has_quorum", "last_leader_contact", "error", "quarantined", "version", "release", "cluster_version", "history")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    API_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLIED_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DIGEST_INDEX_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_BACKLOG_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    DB_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    DB_OK_FIELD_NUMBER: _ClassVar[int]
    BACKPRESSURE_FIELD_NUMBER: _ClassVar[int]
    HAS_QUORUM_FIELD_NUMBER: _ClassVar[int]
    LAST_LEADER_CONTACT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_VERSION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    api_address: str
    role: NodeRole
    term: int
    commit_index: int
    applied_index: int
    lag: int
    digest: str
    digest_index: int
    outbox_backlog: int
    outbox_last_seq: int
    outbox_acked_seq: int
    db_watermark: int
    db_ok: bool
    backpressure: bool
    has_quorum: bool
    last_leader_contact: _timestamp_pb2.Timestamp
    error: str
    quarantined: int
    version: str
    release: int
    cluster_version: int
    history: NodeHistory
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., api_address: _Optional[str] = ..., role: _Optional[_Union[NodeRole, str]] = ..., term: _Optional[int] = ..., commit_index: _Optional[int] = ..., applied_index: _Optional[int] = ..., lag: _Optional[int] = ..., digest: _Optional[str] = ..., digest_index: _Optional[int] = ..., outbox_backlog: _Optional[int] = ..., outbox_last_seq: _Optional[int] = ..., outbox_acked_seq: _Optional[int] = ..., db_watermark: _Optional[int] = ..., db_ok: _Optional[bool] = ..., backpressure: _Optional[bool] = ..., has_quorum: _Optional[bool] = ..., last_leader_contact: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[str] = ..., quarantined: _Optional[int] = ..., version: _Optional[str] = ..., release: _Optional[int] = ..., cluster_version: _Optional[int] = ..., history: _Optional[_Union[NodeHistory, _Mapping]] = ...) -> None: ...

class NodeHistory(_message.Message):
    __slots__ = ("events", "samples")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[NodeEvent]
    samples: _containers.RepeatedCompositeFieldContainer[NodeSample]
    def __init__(self, events: _Optional[_Iterable[_Union[NodeEvent, _Mapping]]] = ..., samples: _Optional[_Iterable[_Union[NodeSample, _Mapping]]] = ...) -> None: ...

class NodeEvent(_message.Message):
    __slots__ = ("at", "kind", "term", "detail")
    AT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    kind: str
    term: int
    detail: str
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[str] = ..., term: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class NodeSample(_message.Message):
    __slots__ = ("at", "commit_index", "apply_lag", "commit_latency_seconds")
    AT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    APPLY_LAG_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LATENCY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    at: _timestamp_pb2.Timestamp
    commit_index: int
    apply_lag: int
    commit_latency_seconds: float
    def __init__(self, at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., commit_index: _Optional[int] = ..., apply_lag: _Optional[int] = ..., commit_latency_seconds: _Optional[float] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("nodes", "freshness")
    NODES_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    freshness: _common_pb2.Freshness
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class TransferLeadershipRequest(_message.Message):
    __slots__ = ("target", "request_id")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    target: str
    request_id: str
    def __init__(self, target: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class TransferLeadershipResponse(_message.Message):
    __slots__ = ("leader_id", "freshness")
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    leader_id: str
    freshness: _common_pb2.Freshness
    def __init__(self, leader_id: _Optional[str] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class AddNodeRequest(_message.Message):
    __slots__ = ("address", "request_id")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    address: str
    request_id: str
    def __init__(self, address: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class RemoveNodeRequest(_message.Message):
    __slots__ = ("address", "request_id")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    address: str
    request_id: str
    def __init__(self, address: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class MembershipResponse(_message.Message):
    __slots__ = ("nodes", "freshness")
    NODES_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    freshness: _common_pb2.Freshness
    def __init__(self, nodes: _Optional[_Iterable[str]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class AuditRecord(_message.Message):
    __slots__ = ("id", "log_index", "at", "actor", "action", "dag_id", "run_id", "detail")
    ID_FIELD_NUMBER: _ClassVar[int]
    LOG_INDEX_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    id: int
    log_index: int
    at: _timestamp_pb2.Timestamp
    actor: str
    action: str
    dag_id: str
    run_id: str
    detail: str
    def __init__(self, id: _Optional[int] = ..., log_index: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor: _Optional[str] = ..., action: _Optional[str] = ..., dag_id: _Optional[str] = ..., run_id: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class ListAuditRecordsRequest(_message.Message):
    __slots__ = ("since", "dag_id", "actor", "limit", "before_id")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    DAG_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    BEFORE_ID_FIELD_NUMBER: _ClassVar[int]
    since: _timestamp_pb2.Timestamp
    dag_id: str
    actor: str
    limit: int
    before_id: int
    def __init__(self, since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dag_id: _Optional[str] = ..., actor: _Optional[str] = ..., limit: _Optional[int] = ..., before_id: _Optional[int] = ...) -> None: ...

class ListAuditRecordsResponse(_message.Message):
    __slots__ = ("records", "freshness")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[AuditRecord]
    freshness: _common_pb2.Freshness
    def __init__(self, records: _Optional[_Iterable[_Union[AuditRecord, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...
