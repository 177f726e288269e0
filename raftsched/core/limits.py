"""Every bound on a value that a client, a DAG file or a task's output can send, in one place.

Whatever enters the Raft log is replicated to every node and replayed on every restart, so a
value that can break one apply breaks the whole cluster for good. Each value is therefore
checked twice against the bounds below: at the door (the API, the DAG parser, the worker),
where the caller gets a clear error, and again inside ``SchedulerState.apply`` (the core
trusts no caller), where a command that breaks a bound is refused before it changes anything.

The checks are pure and never recurse on the value: JSON is walked with an explicit stack,
so a conf nested 100,000 levels deep is refused, not a ``RecursionError``.

A failed check raises :class:`~raftsched.errors.LimitExceeded`, which names the field, the
limit and the value's size (the API answers INVALID_ARGUMENT with it). Texts that are not
ours to refuse (a task's log output, an outcome message, an import error's traceback) are
*sanitized* instead with :func:`clean_text`: NUL and lone surrogates (bytes that are not valid
UTF-8) become U+FFFD, so the same characters reach every node and every database
(PostgreSQL refuses NUL in text).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from raftsched.errors import LimitExceeded

# -- identifiers (the DB's String(250) columns) ---------------------------------------------
MAX_ID_CHARS = 250  # dag_id, run_id, task_id, worker_id, request_id
MAX_FILELOC_CHARS = 1024  # import_error.fileloc is String(1024)

# -- DAG specs --------------------------------------------------------------------------------
MAX_TASKS_PER_DAG = 10_000
MAX_DAGS_PER_COMMAND = 1_000
MAX_TAGS = 50
MAX_TAG_CHARS = 100
MAX_DESCRIPTION_CHARS = 4_096
MAX_COMMAND_CHARS = 65_536  # a BashTask's command
MAX_KWARGS_BYTES = 65_536  # a PythonTask's kwargs as JSON
# Dynamic task mapping (core/mapping.py): a mapped task's expansion as JSON, the instances
# one task may expand into (its max_map_length: default, ceiling) and those of one run.
MAX_EXPAND_BYTES = 65_536
DEFAULT_MAX_MAP_LENGTH = 1_024
MAX_MAP_LENGTH = 10_000
MAX_MAPPED_PER_RUN = 10_000
MAX_ENV_VARS = 256
MAX_ENV_NAME_CHARS = 1_024
MAX_CALLABLE_CHARS = 1_024  # a PythonTask's attribute path in its DAG file
MAX_ZONE_CHARS = 250
MAX_ENV_VALUE_CHARS = 32_768
MAX_SCHEDULE_CHARS = 1_024
MAX_RETRIES = 1_000
MAX_DURATION_SECONDS = 366 * 86_400  # retry delays, timeouts, schedule intervals
MAX_PRIORITY_WEIGHT = 1_000_000_000
MAX_ACTIVE = 10_000_000  # max_active_runs, max_active_tasks ("unlimited" is a big number)
# Schedule policies (core/slot_policy.py)
MAX_RUNS_LIMIT = 1_000_000_000  # a DAG's max_runs
MAX_CATCHUP_WINDOW_SECONDS = 10 * 366 * 86_400
MAX_JITTER_SECONDS = 366 * 86_400
# overlap="buffer_all": slots waiting for the active run; older ones past it are skipped
# ("buffer_full"), each check walks at most this many slots back from now
MAX_BUFFERED_RUNS = 100
MAX_SKIP_RECORDS = 20  # skipped-slot ranges a DAG record keeps (the newest)
MAX_PAUSE_NOTE_CHARS = 1_000  # why a DAG is paused (`dags pause --note`, pause_on_failure)

# -- runs ---------------------------------------------------------------------------------------
MAX_CONF_BYTES = 65_536  # a run's conf as compact JSON
MAX_CONF_DEPTH = 32  # nesting of objects and arrays, the conf object itself is depth 1
MAX_RUNS_PER_COMMAND = 5_000
# A DAG's params (DagSpec.params_json): {name: {"default": value, "type": ..., ...}}. A
# default is a conf-like value, so params nest two levels deeper than a conf.
MAX_PARAMS = 256
MAX_PARAM_NAME_CHARS = MAX_ID_CHARS
MAX_PARAMS_BYTES = 65_536
MAX_PARAMS_DEPTH = 34  # MAX_CONF_DEPTH + 2
PARAM_KEYS = frozenset(
    {"default", "type", "enum", "minimum", "maximum", "minLength", "maxLength", "description"}
)
PARAM_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})
MIN_DATE = datetime(1900, 1, 1, tzinfo=UTC)  # logical dates, start/end dates, "now"
# A run's data interval may begin before MIN_DATE (a DAG starting on 1900-01-01 has its first
# interval start a period earlier; periods are at most MAX_DURATION_SECONDS or a cron year)
MIN_INTERVAL_DATE = datetime(1898, 1, 1, tzinfo=UTC)
MAX_DATE = datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)

# -- tasks, leases, logs ------------------------------------------------------------------------
MAX_ITEMS_PER_COMMAND = 10_000  # queue/heartbeat/expire/release/clear/mark decisions
MAX_LEASES_PER_CALL = 1_000
MAX_QUEUES_PER_WORKER = 64  # queues one worker serves (`raftsched worker --queues`)
MIN_LEASE_TTL_SECONDS = 1.0
MAX_LEASE_TTL_SECONDS = 86_400.0
MAX_LOG_CHUNK_CHARS = 65_536  # one chunk of a task's output; the worker splits longer lines
MAX_LOG_CHUNKS_PER_CALL = 64
MAX_MESSAGE_CHARS = 4_096  # an attempt's outcome message
# What apply accepts of any output text before it cuts it to the bounds above (older releases
# sent longer texts; the API cuts them first, so this only stops absurd sizes)
MAX_OUTPUT_TEXT_CHARS = 4 * 1024 * 1024
MAX_IMPORT_ERRORS = 10_000
MAX_IMPORT_ERROR_CHARS = 65_536  # an import error's message or traceback
MAX_TOKEN = (1 << 63) - 1
MAX_TRY_NUMBER = 1_000_000
MIN_EXIT_CODE, MAX_EXIT_CODE = -(1 << 31), (1 << 31) - 1
MAX_JSON_INT = (1 << 63) - 1

# -- variables and connections (core.handlers_secrets) ---------------------------------------
# A name is an identifier (it becomes part of an environment variable's name on the worker)
SECRET_KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_SECRET_KEY_CHARS = 128
MAX_SECRET_VALUE_CHARS = 16_384  # a value in clear text (checked by the API before it encrypts)
# The Fernet token of a value of MAX_SECRET_VALUE_CHARS UTF-8 characters (4 bytes each at most)
# in base64: (57 + 16 * ceil((bytes + 1) / 16)) * 4 / 3, rounded up generously
MAX_SECRET_CIPHERTEXT_CHARS = 90_000
MAX_SECRET_DESCRIPTION_CHARS = 1_024
MAX_SECRETS = 10_000  # variables and connections together
# What a Fernet token looks like (urlsafe base64 of version byte 0x80 + ...): the core refuses
# anything else, so a value in clear text can never enter the log by mistake
FERNET_TOKEN_PATTERN = re.compile(r"gAAAAA[A-Za-z0-9_-]+={0,2}")

# -- the audit log (core/audit.py) ----------------------------------------------------------
MAX_ACTOR_CHARS = 200  # "<user> via <token name>": the API bounds each part to less
# Printable characters only: an actor is shown in a terminal and a web page
ACTOR_PATTERN = re.compile(r"[^\x00-\x1f\x7f-\x9f]*")
MAX_AUDIT_RECORDS = 1_000  # the recent window every replica holds; the DB keeps them all
MAX_AUDIT_DETAIL_CHARS = 500

# -- the outbox's hard cap ------------------------------------------------------------------
# Past these, apply refuses new leases and log appends (RESOURCE_EXHAUSTED), so memory on every
# node stays bounded while the DB is away; completions are still accepted (their log chunks
# are dropped with a note) so running work can finish. New runs stop earlier, at the leader's
# configurable back-pressure bound ([scheduler] max_outbox).
OUTBOX_HARD_CAP_ENTRIES = 200_000
OUTBOX_HARD_CAP_LOG_CHARS = 256 * 1024 * 1024

REPLACEMENT = "\ufffd"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def clean_text(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced by U+FFFD (valid UTF-8 without NUL)."""
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join(REPLACEMENT if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)
    return text


def clean_bytes(data: bytes) -> str:
    """Bytes of a task's output as text: invalid UTF-8 and NUL become U+FFFD."""
    return data.decode("utf-8", "replace").replace("\x00", REPLACEMENT)


def is_clean(text: str) -> bool:
    """True when ``text`` has no NUL and encodes as UTF-8 (what every DB accepts)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(field: str, value: object, max_chars: int, *, empty: bool = True) -> str:
    """A string of at most ``max_chars`` with no NUL and valid UTF-8."""
    if not isinstance(value, str):
        raise LimitExceeded(field, f"must be a string, got {type(value).__name__}")
    if len(value) > max_chars:
        raise LimitExceeded(
            field,
            f"is {len(value)} characters long; the limit is {max_chars}",
            limit=max_chars,
            size=len(value),
        )
    if not empty and not value:
        raise LimitExceeded(field, "must not be empty")
    if not is_clean(value):
        raise LimitExceeded(field, "contains a NUL character or invalid UTF-8 (a lone surrogate)")
    return value


def check_id(field: str, value: object) -> str:
    """An identifier: 1..250 characters, printable (no control characters), valid UTF-8."""
    text = check_text(field, value, MAX_ID_CHARS, empty=False)
    if _CONTROL.search(text):
        raise LimitExceeded(field, "contains a control character (newline, tab, ...)")
    return text


def check_ids(field: str, values: Iterable[object], max_count: int) -> tuple[str, ...]:
    out = tuple(values)
    check_count(field, len(out), max_count)
    return tuple(check_id(f"{field}[{i}]", v) for i, v in enumerate(out))


def check_count(field: str, count: int, max_count: int) -> int:
    if count > max_count:
        raise LimitExceeded(
            field, f"has {count} items; the limit is {max_count}", limit=max_count, size=count
        )
    return count


def check_int(field: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LimitExceeded(field, f"must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise LimitExceeded(field, f"is {_num(value)}; allowed is {lo}..{hi}", limit=hi)
    return value


def check_float(field: str, value: object, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LimitExceeded(field, f"must be a number, got {type(value).__name__}")
    if isinstance(value, int) and abs(value) > 10**18:
        raise LimitExceeded(field, f"is {_num(value)}; allowed is {lo:g}..{hi:g}")
    number = float(value)
    if not math.isfinite(number) or not lo <= number <= hi:
        raise LimitExceeded(field, f"is {number!r}; allowed is {lo:g}..{hi:g}")
    return number


def check_datetime(
    field: str, value: object, *, optional: bool = False, earliest: datetime = MIN_DATE
) -> datetime | None:
    """An aware datetime between ``earliest`` (MIN_DATE) and MAX_DATE (no overflow in any
    timetable maths)."""
    if value is None and optional:
        return None
    if not isinstance(value, datetime):
        raise LimitExceeded(field, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise LimitExceeded(field, "must carry a time zone offset (e.g. +00:00)")
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise LimitExceeded(field, f"{value!r} is out of range") from None
    if not earliest <= utc <= MAX_DATE:
        raise LimitExceeded(
            field,
            f"{utc.isoformat()} is out of range; allowed is {earliest.date()}..{MAX_DATE.date()}",
        )
    return value


def check_json_object(field: str, value: object, max_bytes: int, max_depth: int) -> str:
    """A JSON object (dict with str keys; values None, bool, int, finite float, clean str,
    list, dict) at most ``max_depth`` deep and ``max_bytes`` long as compact JSON. Returns that
    compact, key-sorted JSON text. Walks with an explicit stack: never recurses."""
    if not isinstance(value, dict):
        raise LimitExceeded(field, f"must be a JSON object, got {_json_type(value)}")
    budget = max_bytes  # a cheap upper estimate while walking, so a huge value stops early
    stack: list[tuple[object, int, str]] = [(value, 1, field)]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise LimitExceeded(
                    field,
                    f"is nested deeper than {max_depth} levels (at {path})",
                    limit=max_depth,
                    size=depth,
                )
            budget -= 2 + len(item)
            if isinstance(item, dict):
                for key, sub in item.items():
                    if not isinstance(key, str):
                        raise LimitExceeded(field, f"has a non-string key at {path}")
                    if not is_clean(key):
                        raise LimitExceeded(field, f"has a key with NUL or invalid UTF-8 at {path}")
                    budget -= len(key) + 3
                    stack.append((sub, depth + 1, f"{path}.{key[:40]}"))
            else:
                for i, sub in enumerate(item):
                    stack.append((sub, depth + 1, f"{path}[{i}]"))
        elif isinstance(item, str):
            if not is_clean(item):
                raise LimitExceeded(field, f"has a string with NUL or invalid UTF-8 at {path}")
            budget -= len(item) + 2
        elif item is None or isinstance(item, bool):
            budget -= 5
        elif isinstance(item, int):
            if abs(item) > MAX_JSON_INT:
                raise LimitExceeded(field, f"has an integer beyond 64 bits at {path}")
            budget -= 20
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise LimitExceeded(field, f"has {item!r} at {path}, which JSON cannot carry")
            budget -= 24
        else:
            raise LimitExceeded(field, f"has a {type(item).__name__} at {path}; JSON only")
        if budget < -max_bytes:  # far past the bound: stop walking a huge value
            raise LimitExceeded(field, f"is larger than {max_bytes} bytes", limit=max_bytes)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise LimitExceeded(
            field, f"is {size} bytes as JSON; the limit is {max_bytes}", limit=max_bytes, size=size
        )
    return text


def check_conf(value: object, field: str = "conf") -> str:
    return check_json_object(field, value, MAX_CONF_BYTES, MAX_CONF_DEPTH)


def parse_conf(text: str, field: str = "conf") -> dict[str, Any]:
    """A conf given as JSON text (CLI, gRPC, web form) -> a checked dict."""
    if not isinstance(text, str):
        raise LimitExceeded(field, "must be JSON text")
    if len(text) > MAX_CONF_BYTES * 2:
        raise LimitExceeded(
            field,
            f"is {len(text)} characters long; the limit is {MAX_CONF_BYTES} bytes",
            limit=MAX_CONF_BYTES,
            size=len(text),
        )
    if _bracket_depth(text) > MAX_CONF_DEPTH:
        raise LimitExceeded(
            field, f"is nested deeper than {MAX_CONF_DEPTH} levels", limit=MAX_CONF_DEPTH
        )
    try:
        value = loads_json(text)
    except (ValueError, RecursionError) as err:
        raise LimitExceeded(field, f"is not valid JSON ({err})") from None
    check_conf(value, field)
    return value


# Longer integer literals are refused while parsing, by their length: Python's own int-digit
# limit (4300 by default) depends on each node's PYTHONINTMAXSTRDIGITS, and a result that
# differed between nodes would part their replicated states.
MAX_JSON_INT_DIGITS = 4_300


def _parse_int(literal: str) -> int:
    if len(literal) > MAX_JSON_INT_DIGITS:
        raise ValueError(f"an integer of {len(literal)} digits")
    return int(literal)


def loads_json(text: str) -> Any:
    """``json.loads`` with the same outcome on every node (see MAX_JSON_INT_DIGITS)."""
    return json.loads(text, parse_int=_parse_int)


def check_params_json(field: str, text: object) -> dict[str, Any]:
    """A DAG's params as JSON text ("" = none): an object of at most MAX_PARAMS params, each
    an object with only PARAM_KEYS, bounded in size and depth. Returns the parsed params."""
    check_text(field, text, MAX_PARAMS_BYTES)
    assert isinstance(text, str)
    if not text:
        return {}
    if _bracket_depth(text) > MAX_PARAMS_DEPTH:
        raise LimitExceeded(field, f"is nested deeper than {MAX_PARAMS_DEPTH} levels")
    try:
        value = loads_json(text)
    except (ValueError, RecursionError) as err:
        raise LimitExceeded(field, f"is not valid JSON ({str(err)[:200]})") from None
    check_json_object(field, value, MAX_PARAMS_BYTES, MAX_PARAMS_DEPTH)
    check_count(field, len(value), MAX_PARAMS)
    for name, param in value.items():
        check_text(f"{field} name", name, MAX_PARAM_NAME_CHARS, empty=False)
        if not isinstance(param, dict):
            raise LimitExceeded(f"{field}[{name[:60]}]", "must be a JSON object")
        unknown = sorted(set(param) - PARAM_KEYS)
        if unknown:
            raise LimitExceeded(f"{field}[{name[:60]}]", f"has unknown keys {unknown[:5]}")
        kinds = param.get("type", [])
        for kind in kinds if isinstance(kinds, list) else [kinds]:
            if not isinstance(kind, str) or kind not in PARAM_TYPES:  # a list is unhashable
                raise LimitExceeded(f"{field}[{name[:60]}].type", f"{str(kind)[:40]!r} is unknown")
    return value


def _bracket_depth(text: str) -> int:
    """Nesting of [ and { outside strings: refuses deep JSON before json.loads recurses."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _json_type(value: object) -> str:
    return {list: "an array", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _num(value: int) -> str:
    return str(value) if abs(value) < 10**30 else f"a {value.bit_length()}-bit integer"
