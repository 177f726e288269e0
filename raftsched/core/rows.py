"""Outbox rows, typed: what the state machine emits and the materializer writes, one class
per ``OutboxKind``, shared by both ends.

- ``to_wire()``: the JSON-able dict an ``OutboxEntry`` carries (datetimes as ISO-8601 UTC).
  Snapshots and the digest hold these dicts, so their keys and order are part of the
  replicated state (tests/unit/test_digest_golden.py pins them).
- ``from_wire(data)``: the row back from such a dict (the materializer; tolerant of keys an
  older release did not write).
- ``columns()``: the metadata DB's row (aware datetimes; ``store.tables`` has the columns).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, ClassVar

from raftsched.core.model import OMIT_AT_DEFAULT, added_field, parse_utc, utc_iso


@dataclass(frozen=True, slots=True)
class _Row:
    TIMES: ClassVar[frozenset[str]] = frozenset()

    def to_wire(self) -> dict[str, Any]:
        # Every run and task instance apply writes passes here: the per-class plan is built
        # once (``dataclasses.fields`` was most of the cost), not per row
        plan = _WIRE_PLANS.get(type(self))
        if plan is None:
            plan = _wire_plan(type(self))
        names, times, added = plan
        out = dict(zip(names, _values(self, names), strict=True))
        for name, default in added:  # fields added later, at their default: as before
            if out[name] == default:
                del out[name]
        for name in times:
            value = out.get(name)
            if value is not None:
                out[name] = (
                    _iso(value)
                    if type(value) is datetime and value.tzinfo is UTC
                    else utc_iso(value)
                )
        return out

    def columns(self) -> dict[str, Any]:
        plan = _WIRE_PLANS.get(type(self)) or _wire_plan(type(self))
        return dict(zip(plan[0], _values(self, plan[0]), strict=True))


_GETTERS: dict[tuple[str, ...], attrgetter[Any]] = {}


def _values(row: _Row, names: tuple[str, ...]) -> tuple[Any, ...]:
    getter = _GETTERS.get(names)
    if getter is None:
        getter = _GETTERS[names] = attrgetter(*names)  # every row class has 2+ fields
    return getter(row)


# Parsed ISO texts (the materializer reads every row's dates back; they recur as in _iso)
_PARSED: dict[str, datetime] = {}


def _parse(value: str | None) -> datetime | None:
    """``parse_utc``, memoized for the texts it accepts."""
    if value is None:
        return None
    parsed = _PARSED.get(value)
    if parsed is None:
        parsed = parse_utc(value)  # raises for a naive or malformed text: not kept
        if len(_PARSED) >= _ISO_MEMO_SIZE:
            _PARSED.clear()
        _PARSED[value] = parsed
    return parsed


# ISO texts of recent UTC datetimes: a run's dates recur in its rows, its neighbours' and its
# task instances' (``now`` is shared by a whole command); bounded, emptied when full
_ISO_TEXTS: dict[datetime, str] = {}
_ISO_MEMO_SIZE = 4096


def _iso(value: datetime) -> str:
    """``value.isoformat()`` of a UTC datetime (equal UTC datetimes spell the same)."""
    text = _ISO_TEXTS.get(value)
    if text is None:
        if len(_ISO_TEXTS) >= _ISO_MEMO_SIZE:
            _ISO_TEXTS.clear()
        text = _ISO_TEXTS[value] = value.isoformat()
    return text


# per row class: field names (in order), the time fields, (added field, default)
_WIRE_PLANS: dict[type, tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, Any], ...]]] = {}


def _wire_plan(
    kind: type[_Row],
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, Any], ...]]:
    every = fields(kind)
    names = tuple(f.name for f in every)
    added = tuple(
        (f.name, f.default)
        for f in every
        if f.metadata.get(OMIT_AT_DEFAULT) and f.default is not MISSING
    )
    plan = _WIRE_PLANS[kind] = (names, tuple(n for n in names if n in kind.TIMES), added)
    return plan


@dataclass(frozen=True, slots=True)
class DagRow(_Row):
    TIMES: ClassVar[frozenset[str]] = frozenset({"updated_at"})

    dag_id: str
    fileloc: str
    spec: dict[str, Any]  # DagSpec.to_dict()
    spec_hash: str
    paused: bool
    active: bool
    updated_at: datetime | None

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> DagRow:
        return cls(
            dag_id=d["dag_id"],
            fileloc=d["fileloc"],
            spec=d["spec"],
            spec_hash=d["spec_hash"],
            paused=bool(d.get("paused", False)),
            active=bool(d.get("active", True)),
            updated_at=_parse(d.get("updated_at")),
        )


@dataclass(frozen=True, slots=True)
class RunRow(_Row):
    TIMES: ClassVar[frozenset[str]] = frozenset(
        {
            "logical_date",
            "data_interval_start",
            "data_interval_end",
            "created_at",
            "start_date",
            "end_date",
        }
    )

    dag_id: str
    run_id: str
    logical_date: datetime | None
    data_interval_start: datetime | None
    data_interval_end: datetime | None
    run_type: str
    state: str
    conf: dict[str, Any]
    created_at: datetime | None
    start_date: datetime | None
    end_date: datetime | None

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> RunRow:
        return cls(
            dag_id=d["dag_id"],
            run_id=d["run_id"],
            logical_date=_parse(d.get("logical_date")),
            data_interval_start=_parse(d.get("data_interval_start")),
            data_interval_end=_parse(d.get("data_interval_end")),
            run_type=str(d["run_type"]),
            state=str(d["state"]),
            conf=d.get("conf") or {},
            created_at=_parse(d.get("created_at")),
            start_date=_parse(d.get("start_date")),
            end_date=_parse(d.get("end_date")),
        )


@dataclass(frozen=True, slots=True)
class TaskRow(_Row):
    """One attempt (dag_id, run_id, task_id, try_number) of a task instance."""

    TIMES: ClassVar[frozenset[str]] = frozenset({"queued_at", "start_date", "end_date"})

    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    state: str
    worker_id: str | None
    lease_token: int | None
    queued_at: datetime | None
    start_date: datetime | None
    end_date: datetime | None
    exit_code: int | None
    message: str
    result_json: str | None = added_field(None)  # a SUCCESS attempt's XCom (core/xcom.py)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> TaskRow:
        return cls(
            dag_id=d["dag_id"],
            run_id=d["run_id"],
            task_id=d["task_id"],
            try_number=int(d["try_number"]),
            state=str(d["state"]),
            worker_id=d.get("worker_id"),
            lease_token=d.get("lease_token"),
            queued_at=_parse(d.get("queued_at")),
            start_date=_parse(d.get("start_date")),
            end_date=_parse(d.get("end_date")),
            exit_code=d.get("exit_code"),
            message=d.get("message") or "",
            result_json=d.get("result_json"),
        )


@dataclass(frozen=True, slots=True)
class LogRow(_Row):
    """One chunk of an attempt's output; immutable once written."""

    TIMES: ClassVar[frozenset[str]] = frozenset({"created_at"})

    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    chunk_seq: int
    stream: str  # "stdout" | "stderr"
    text: str
    created_at: datetime | None

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> LogRow:
        return cls(
            dag_id=d["dag_id"],
            run_id=d["run_id"],
            task_id=d["task_id"],
            try_number=int(d["try_number"]),
            chunk_seq=int(d["chunk_seq"]),
            stream=str(d["stream"]),
            text=d["text"],
            created_at=_parse(d.get("created_at")),
        )


@dataclass(frozen=True, slots=True)
class SecretRow(_Row):
    """A variable or connection as the state holds it: ciphertext only, never the value.
    ``ciphertext`` None: it was deleted (the materializer deletes the row)."""

    TIMES: ClassVar[frozenset[str]] = frozenset({"updated_at"})

    kind: str  # "variable" | "connection"
    key: str
    ciphertext: str | None  # a Fernet token
    description: str
    updated_at: datetime | None
    dags: str = added_field("")  # the DAGs that may read it, comma-separated; "": every DAG

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> SecretRow:
        return cls(
            kind=str(d["kind"]),
            key=str(d["key"]),
            ciphertext=d.get("ciphertext"),
            description=d.get("description") or "",
            updated_at=_parse(d.get("updated_at")),
            dags=str(d.get("dags") or ""),
        )


@dataclass(frozen=True, slots=True)
class CallbackJobRow(_Row):
    """One callback job (``core.callback_table.CallbackJob``) as it is now; ``job`` is its
    ``to_list()``, which the rebuild reads back whole."""

    TIMES: ClassVar[frozenset[str]] = frozenset({"created_at", "finished_at"})

    job_id: str
    seq: int
    dag_id: str
    run_id: str
    state: str
    created_at: datetime | None
    finished_at: datetime | None
    job: list[Any]

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> CallbackJobRow:
        return cls(
            job_id=str(d["job_id"]),
            seq=int(d["seq"]),
            dag_id=str(d["dag_id"]),
            run_id=str(d["run_id"]),
            state=str(d["state"]),
            created_at=_parse(d.get("created_at")),
            finished_at=_parse(d.get("finished_at")),
            job=list(d["job"]),
        )


@dataclass(frozen=True, slots=True)
class ImportErrorsRow:
    """The whole import_error table's new content: ``errors`` are (fileloc, message,
    traceback); the last error per file wins."""

    errors: tuple[tuple[str, str, str], ...]
    updated_at: datetime | None

    def to_wire(self) -> dict[str, Any]:
        return {
            "errors": [
                {"fileloc": fileloc, "message": message, "traceback": traceback}
                for fileloc, message, traceback in self.errors
            ],
            "updated_at": utc_iso(self.updated_at),
        }

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> ImportErrorsRow:
        return cls(
            errors=tuple(
                (e["fileloc"], e["message"], e.get("traceback") or "") for e in d.get("errors", ())
            ),
            updated_at=_parse(d.get("updated_at")),
        )

    def columns(self) -> list[dict[str, Any]]:
        rows = {
            fileloc: {
                "fileloc": fileloc,
                "message": message,
                "traceback": traceback,
                "updated_at": self.updated_at,
            }
            for fileloc, message, traceback in self.errors
        }
        return list(rows.values())


@dataclass(frozen=True, slots=True)
class AuditRow(_Row):
    """One audit record (``core.audit``): who changed what, at which log index, in the window
    every replica holds and as the ``audit_log`` table keeps it (insert only)."""

    TIMES: ClassVar[frozenset[str]] = frozenset({"at"})

    id: int  # 1, 2, 3, ... in log order, across the cluster's life
    log_index: int
    at: datetime | None  # the command's time (the state's clock)
    actor: str
    action: str  # core.audit.ACTIONS
    dag_id: str
    run_id: str
    detail: str

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> AuditRow:
        return cls(
            id=int(d["id"]),
            log_index=int(d["log_index"]),
            at=_parse(d.get("at")),
            actor=str(d["actor"]),
            action=str(d["action"]),
            dag_id=str(d.get("dag_id") or ""),
            run_id=str(d.get("run_id") or ""),
            detail=str(d.get("detail") or ""),
        )
