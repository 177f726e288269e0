"""Request-level checks of every field a client can send, against ``raftsched.core.limits``.

Whatever a servicer proposes enters the Raft log, is replicated to every node and replayed at
every restart, so each field is checked here, at the door, before anything is read or
proposed (the core checks again). A failed check raises
:class:`~raftsched.errors.LimitExceeded`; ``translate_errors`` answers it INVALID_ARGUMENT
with ``str(err)``, which names the field, the limit and the size. Texts that are not ours to
refuse (a task's log output, an outcome message) are sanitized instead (:func:`log_chunks`,
:func:`message`).

Pure functions, no gRPC calls.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from raftsched.api.servicers.context import MAX_REQUEST_ID
from raftsched.core import commands as c
from raftsched.core import limits
from raftsched.core.model import TaskKey
from raftsched.errors import LimitExceeded

# Room kept in a request id for the suffixes the servicers add ("#<attempt>", "#<hash>").
REQUEST_ID_SUFFIX = 30
MAX_CLIENT_REQUEST_ID = min(limits.MAX_ID_CHARS, MAX_REQUEST_ID) - REQUEST_ID_SUFFIX
MAX_SEARCH_CHARS = 1_000  # ListDags' search text
MAX_FILTER_STATES = 32
MAX_ADDRESS_CHARS = 300  # host:port (a DNS name is at most 253 characters)
MAX_USERNAME_CHARS = 64
MAX_PASSWORD_CHARS = 1_024
STREAMS = ("stdout", "stderr")


def ident(field: str, value: object, *, required: bool = True) -> str:
    """An id (dag_id, run_id, task_id, worker_id, ...): 1..250 printable characters.
    ``required=False``: the empty string passes (an optional filter, a run id to derive)."""
    if not required and value == "":
        return ""
    return limits.check_id(field, value)


def ids(field: str, values: Iterable[object], max_count: int) -> tuple[str, ...]:
    return limits.check_ids(field, values, max_count)


def request_id(value: object) -> str:
    """A client's idempotency key; empty: the server makes one."""
    if value == "":
        return ""
    text = limits.check_id("request_id", value)
    if len(text) > MAX_CLIENT_REQUEST_ID:
        raise LimitExceeded(
            "request_id",
            f"is {len(text)} characters long; the limit is {MAX_CLIENT_REQUEST_ID}",
            limit=MAX_CLIENT_REQUEST_ID,
            size=len(text),
        )
    return text


def key(message: Any, field: str = "key") -> TaskKey:
    """A TaskKey message (every part required)."""
    pb = getattr(message, field)
    return TaskKey(
        ident(f"{field}.dag_id", pb.dag_id),
        ident(f"{field}.run_id", pb.run_id),
        ident(f"{field}.task_id", pb.task_id),
    )


def token(field: str, value: object) -> int:
    return limits.check_int(field, value, 0, limits.MAX_TOKEN)


def count(field: str, value: object, lo: int, hi: int) -> int:
    return limits.check_int(field, value, lo, hi)


def date(field: str, value: object) -> datetime:
    """An aware datetime in MIN_DATE..MAX_DATE (no overflow in any date arithmetic)."""
    checked = limits.check_datetime(field, value)
    assert checked is not None
    return checked


def timestamp(message: Any, field: str, *, required: bool = False) -> datetime | None:
    """A google.protobuf.Timestamp field as an aware UTC datetime in MIN_DATE..MAX_DATE;
    None when unset (LimitExceeded when ``required``)."""
    if not message.HasField(field):
        if required:
            raise LimitExceeded(field, "is required: a logical date (UTC timestamp)")
        return None
    try:
        value = getattr(message, field).ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError):
        pb = getattr(message, field)
        raise LimitExceeded(
            field,
            f"(seconds={pb.seconds}, nanos={pb.nanos}) is not a valid timestamp; allowed is"
            f" {limits.MIN_DATE.date()}..{limits.MAX_DATE.date()}",
        ) from None
    return date(field, value)


def conf(text: object, max_bytes: int, field: str = "conf_json") -> dict[str, Any]:
    """A run's conf as JSON text: empty -> {}; else a JSON object within the bounds (size,
    depth: refused before json.loads can recurse) and within ``[api] max_conf_bytes``."""
    if not isinstance(text, str):
        raise LimitExceeded(field, "must be JSON text")
    if not text.strip():
        return {}
    limit = min(max_bytes, limits.MAX_CONF_BYTES)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise LimitExceeded(
            field,
            f"is {size} bytes long; the limit is {limit} bytes ([api] max_conf_bytes)",
            limit=limit,
            size=size,
        )
    value = limits.parse_conf(text, field)
    compact = len(limits.check_conf(value, field).encode("utf-8"))  # as the core measures it
    if compact > limit:  # "1e5" is "100000.0" once parsed: the compact form may be longer
        raise LimitExceeded(
            field,
            f"is {compact} bytes as compact JSON; the limit is {limit} bytes"
            " ([api] max_conf_bytes)",
            limit=limit,
            size=compact,
        )
    return value


def seconds(field: str, value: object, lo: float, hi: float, *, default: float) -> float:
    """A duration; 0 means ``default``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return float(default)
    return limits.check_float(field, value, lo, hi)


def wait_seconds(field: str, value: object, most: float) -> float:
    """A long-poll wait: 0..inf accepted, capped at ``most``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise LimitExceeded(field, f"must be a number >= 0, got {value!r}")
    if value < 0:
        raise LimitExceeded(field, f"is {value!r}; allowed is 0 or more")
    return float(min(value, most))


def lease_refs(refs: Sequence[Any], field: str = "leases") -> tuple[c.LeaseRef, ...]:
    """Repeated LeaseRef messages: at most MAX_ITEMS_PER_COMMAND, every id and token checked."""
    limits.check_count(field, len(refs), limits.MAX_ITEMS_PER_COMMAND)
    return tuple(
        c.LeaseRef(_ref_key(ref, f"{field}[{i}]"), token(f"{field}[{i}].token", ref.token))
        for i, ref in enumerate(refs)
    )


def _ref_key(ref: Any, where: str) -> TaskKey:
    pb = ref.key
    return TaskKey(
        ident(f"{where}.key.dag_id", pb.dag_id),
        ident(f"{where}.key.run_id", pb.run_id),
        ident(f"{where}.key.task_id", pb.task_id),
    )


def log_chunks(chunks: Sequence[Any], field: str = "chunks") -> tuple[c.LogChunk, ...]:
    """At most MAX_LOG_CHUNKS_PER_CALL chunks of at most MAX_LOG_CHUNK_CHARS each; the text is
    sanitized (NUL and invalid UTF-8 become U+FFFD), never refused for what it holds."""
    limits.check_count(field, len(chunks), limits.MAX_LOG_CHUNKS_PER_CALL)
    out = []
    for i, chunk in enumerate(chunks):
        stream, text = chunk.stream, chunk.text
        if stream not in STREAMS:
            shown = limits.clean_text(str(stream)[:40])
            raise LimitExceeded(f"{field}[{i}].stream", f"is {shown!r}; expected stdout or stderr")
        if not isinstance(text, str):
            raise LimitExceeded(f"{field}[{i}].text", "must be a string")
        if len(text) > limits.MAX_LOG_CHUNK_CHARS:
            raise LimitExceeded(
                f"{field}[{i}].text",
                f"is {len(text)} characters long; the limit is {limits.MAX_LOG_CHUNK_CHARS}"
                " (split longer output into several chunks)",
                limit=limits.MAX_LOG_CHUNK_CHARS,
                size=len(text),
            )
        out.append(c.LogChunk(stream, limits.clean_text(text)))
    return tuple(out)


def message(text: object, field: str = "message") -> str:
    """An outcome message: truncated to MAX_MESSAGE_CHARS and sanitized, never refused."""
    if not isinstance(text, str):
        raise LimitExceeded(field, "must be a string")
    return truncate(text, limits.MAX_MESSAGE_CHARS)


def truncate(text: str, most: int) -> str:
    """``text`` sanitized, at most ``most`` characters (a cut one ends with an ellipsis)."""
    if len(text) > most:
        text = text[: most - 1] + "\u2026"
    return limits.clean_text(text)


def text(field: str, value: object, most: int) -> str:
    """A free text a client sends (a search, a filter): bounded and clean, or refused."""
    return limits.check_text(field, value, most)


def tags(field: str, values: Iterable[object]) -> tuple[str, ...]:
    out = tuple(values)
    limits.check_count(field, len(out), limits.MAX_TAGS)
    return tuple(text(f"{field}[{i}]", v, limits.MAX_TAG_CHARS) for i, v in enumerate(out))


def address(field: str, value: object) -> str:
    """host:port, printable ASCII."""
    checked = limits.check_text(field, value, MAX_ADDRESS_CHARS, empty=False)
    if not checked.isascii() or not checked.isprintable() or " " in checked:
        raise LimitExceeded(field, "must be host:port in printable ASCII without spaces")
    return checked


def clean_or_empty(value: str, most: int) -> str:
    """A client's text when it is within ``most`` and clean, else ""."""
    if len(value) > most or not limits.is_clean(value):
        return ""
    return value
