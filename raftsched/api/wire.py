"""Protobuf messages <-> plain Python data: the one conversion the CLI and the web share.

- :func:`to_dict`: a message as JSON-able data: snake_case field names, enums by their short
  lower-case name (``TASK_STATE_UP_FOR_RETRY`` -> ``"up_for_retry"``, UNSPECIFIED -> None),
  timestamps as ISO-8601 UTC strings (unset -> None), optional scalars unset -> None.
- :func:`when` / :func:`iso` / :func:`to_timestamp`: Timestamp fields as aware UTC datetimes
  (the web formats them), as ISO strings (the CLI prints them), and back.
- :func:`enum_short` / :func:`enum_text`: an enum value's short name, by name or by number.

Pure functions over protobuf; no gRPC, no I/O.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.protobuf.descriptor import FieldDescriptor
    from google.protobuf.message import Message

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def to_dict(message: Message) -> dict[str, Any]:
    """A message as JSON-able data (see the module docstring)."""
    return {field.name: _field(message, field) for field in message.DESCRIPTOR.fields}


def _field(message: Message, field: FieldDescriptor) -> Any:
    value = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return {k: _value(v, field.message_type.fields_by_name["value"]) for k, v in value.items()}
    if field.is_repeated:
        return [_value(v, field) for v in value]
    if field.has_presence and not message.HasField(field.name):
        return None
    return _value(value, field)


def _value(value: Any, field: FieldDescriptor) -> Any:
    if field.enum_type is not None:
        return enum_short(field.enum_type.values_by_number[value].name, field.enum_type.name)
    if field.message_type is None:
        return value
    if field.message_type.full_name == "google.protobuf.Timestamp":
        return iso(value)
    return to_dict(value)


def enum_short(name: str, type_name: str) -> str | None:
    """``("RUN_STATE_SUCCESS", "RunState")`` -> ``"success"``; UNSPECIFIED -> None."""
    prefix = _CAMEL.sub("_", type_name).upper() + "_"
    short = name.removeprefix(prefix).lower()
    return None if short == "unspecified" else short


def enum_text(enum: Any, value: int) -> str:
    """By number, from a generated enum wrapper (``common_pb2.TaskState``): the short name;
    ``""`` for UNSPECIFIED or a number this release does not know."""
    try:
        name = enum.Name(value)
    except ValueError:
        return ""
    return enum_short(name, enum.DESCRIPTOR.name) or ""


def iso(timestamp: Any) -> str | None:
    """A Timestamp as ISO-8601 UTC; None when unset (zero)."""
    if not timestamp.seconds and not timestamp.nanos:
        return None
    return timestamp.ToDatetime(tzinfo=UTC).isoformat()


def when(message: Message, field: str) -> datetime | None:
    """An aware UTC datetime from a Timestamp field; None when unset."""
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=UTC)


def to_timestamp(value: datetime) -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    stamp = Timestamp()
    stamp.FromDatetime(value.astimezone(UTC))
    return stamp
