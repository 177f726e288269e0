import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SetSecretRequest(_message.Message):
    __slots__ = ("kind", "key", "value", "description", "request_id", "dags")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DAGS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    key: str
    value: str
    description: str
    request_id: str
    dags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[str] = ..., description: _Optional[str] = ..., request_id: _Optional[str] = ..., dags: _Optional[_Iterable[str]] = ...) -> None: ...

class SetSecretResponse(_message.Message):
    __slots__ = ("changed", "freshness")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    freshness: _common_pb2.Freshness
    def __init__(self, changed: _Optional[bool] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class GetSecretRequest(_message.Message):
    __slots__ = ("kind", "key", "reveal")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REVEAL_FIELD_NUMBER: _ClassVar[int]
    kind: str
    key: str
    reveal: bool
    def __init__(self, kind: _Optional[str] = ..., key: _Optional[str] = ..., reveal: _Optional[bool] = ...) -> None: ...

class ConnectionParts(_message.Message):
    __slots__ = ("conn_type", "host", "port", "login", "has_password", "schema", "extra")
    CONN_TYPE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    LOGIN_FIELD_NUMBER: _ClassVar[int]
    HAS_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    conn_type: str
    host: str
    port: int
    login: str
    has_password: bool
    schema: str
    extra: str
    def __init__(self, conn_type: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., login: _Optional[str] = ..., has_password: _Optional[bool] = ..., schema: _Optional[str] = ..., extra: _Optional[str] = ...) -> None: ...

class Secret(_message.Message):
    __slots__ = ("kind", "key", "description", "updated_at", "masked", "value", "connection", "freshness", "dags")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    MASKED_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CONNECTION_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    DAGS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    key: str
    description: str
    updated_at: _timestamp_pb2.Timestamp
    masked: str
    value: str
    connection: ConnectionParts
    freshness: _common_pb2.Freshness
    dags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[str] = ..., key: _Optional[str] = ..., description: _Optional[str] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., masked: _Optional[str] = ..., value: _Optional[str] = ..., connection: _Optional[_Union[ConnectionParts, _Mapping]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ..., dags: _Optional[_Iterable[str]] = ...) -> None: ...

class ListSecretsRequest(_message.Message):
    __slots__ = ("kind",)
    KIND_FIELD_NUMBER: _ClassVar[int]
    kind: str
    def __init__(self, kind: _Optional[str] = ...) -> None: ...

class ListSecretsResponse(_message.Message):
    __slots__ = ("secrets", "freshness")
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    secrets: _containers.RepeatedCompositeFieldContainer[Secret]
    freshness: _common_pb2.Freshness
    def __init__(self, secrets: _Optional[_Iterable[_Union[Secret, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class DeleteSecretRequest(_message.Message):
    __slots__ = ("kind", "key", "request_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    key: str
    request_id: str
    def __init__(self, kind: _Optional[str] = ..., key: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class DeleteSecretResponse(_message.Message):
    __slots__ = ("freshness",)
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    freshness: _common_pb2.Freshness
    def __init__(self, freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class RotateSecretsRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class RotateSecretsResponse(_message.Message):
    __slots__ = ("rotated", "skipped", "freshness")
    ROTATED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    rotated: int
    skipped: int
    freshness: _common_pb2.Freshness
    def __init__(self, rotated: _Optional[int] = ..., skipped: _Optional[int] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...

class ResolveSecretsRequest(_message.Message):
    __slots__ = ("key", "token", "worker_id", "variables", "connections", "on_demand")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    ON_DEMAND_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.TaskKey
    token: int
    worker_id: str
    variables: _containers.RepeatedScalarFieldContainer[str]
    connections: _containers.RepeatedScalarFieldContainer[str]
    on_demand: bool
    def __init__(self, key: _Optional[_Union[_common_pb2.TaskKey, _Mapping]] = ..., token: _Optional[int] = ..., worker_id: _Optional[str] = ..., variables: _Optional[_Iterable[str]] = ..., connections: _Optional[_Iterable[str]] = ..., on_demand: _Optional[bool] = ...) -> None: ...

class SecretValue(_message.Message):
    __slots__ = ("kind", "key", "value")
    KIND_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    key: str
    value: str
    def __init__(self, kind: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ResolveSecretsResponse(_message.Message):
    __slots__ = ("values", "freshness")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[SecretValue]
    freshness: _common_pb2.Freshness
    def __init__(self, values: _Optional[_Iterable[_Union[SecretValue, _Mapping]]] = ..., freshness: _Optional[_Union[_common_pb2.Freshness, _Mapping]] = ...) -> None: ...
