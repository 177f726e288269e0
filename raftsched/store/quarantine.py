"""The outbox quarantine: entries the DB refused, parked with its error (docs/architecture.md §5).

The materializer (``store.materializer``) isolates each entry the database refuses, writes
the rest, and puts the refused one here with the watermark moving past it, so one bad row
never stops the pipeline. ``raftsched db quarantine list|retry`` shows and re-writes them.

- :func:`refusal_reason` tells a refusal of *the row* (a constraint, a value its column cannot
  hold, NUL in PostgreSQL text, text that cannot be encoded) from everything else (an
  unreachable DB, a missing schema, missing privileges), which must never be quarantined:
  those are retried with back-off.
- :func:`quarantine_row` builds a row that cannot itself be refused: the entry's data as
  ASCII JSON (``ensure_ascii``: NUL becomes ``\\u0000``), the error sanitized to printable
  ASCII and truncated.
- :class:`QuarantinedEntry` is one parked entry as people see it (its key fields pulled out).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Connection

from raftsched.core.model import OutboxEntry, OutboxKind
from raftsched.store import tables as t
from raftsched.store.upsert import insert_ignore

MAX_ERROR_CHARS = 1000
KEY_FIELDS = ("dag_id", "run_id", "task_id", "try_number", "chunk_seq")
# PostgreSQL SQLSTATE class 42 (syntax error or access rule violation: undefined column,
# insufficient privilege, ...) is about the schema or the role, never about one row.
_NOT_ABOUT_THE_ROW_SQLSTATE = "42"


def refusal_reason(err: BaseException) -> str | None:
    """The database's reason when ``err`` means "this row is refused", else None.

    Refusals: IntegrityError (unique, not-null, check), DataError (NUL in PostgreSQL text, a
    value too long), ProgrammingError other than schema/privilege problems (SQLite: a value of
    an unsupported type), a value SQLAlchemy could not bind, text that cannot be encoded.
    None (re-raise: back off and retry, never quarantine) for OperationalError and every
    other error: the database is unreachable, busy, or not migrated.
    """
    if isinstance(err, exc.IntegrityError | exc.DataError):
        return sanitize_error(_db_text(err))
    if isinstance(err, exc.ProgrammingError):
        sqlstate = str(getattr(err.orig, "sqlstate", "") or "")
        if sqlstate.startswith(_NOT_ABOUT_THE_ROW_SQLSTATE):
            return None
        return sanitize_error(_db_text(err))
    if isinstance(err, exc.DBAPIError):
        return None  # OperationalError, InterfaceError, InternalError, ...
    if isinstance(err, exc.StatementError) and isinstance(err.orig, ValueError | TypeError):
        return sanitize_error(f"{type(err.orig).__name__}: {err.orig}")  # could not bind it
    if isinstance(err, UnicodeError):
        return sanitize_error(f"{type(err).__name__}: {err}")
    return None


def _db_text(err: exc.StatementError) -> str:
    """The driver's message (with PostgreSQL's DETAIL line), without SQL or parameters."""
    orig = err.orig
    return f"{type(orig).__name__}: {orig}" if orig is not None else str(err)


def sanitize_error(text: str) -> str:
    """One line of printable ASCII, at most MAX_ERROR_CHARS: safe in any text column."""
    line = "; ".join(part.strip() for part in text.splitlines() if part.strip())
    line = line.encode("ascii", "backslashreplace").decode("ascii")
    line = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in line)
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 3] + "..."
    return line


def encode_data(data: dict[str, Any]) -> str:
    """The entry's data as ASCII JSON (NUL and non-ASCII escaped); :func:`decode_data` undoes it."""
    return json.dumps(data, ensure_ascii=True, sort_keys=True, default=str)


def decode_data(text: str) -> dict[str, Any]:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"quarantined data is a {type(data).__name__}, not a JSON object")
    return data


def quarantine_row(entry: OutboxEntry, reason: str, now: datetime) -> dict[str, Any]:
    """The outbox_quarantine row for ``entry`` refused with ``reason``."""
    return {
        "seq": int(entry.seq),
        "kind": str(OutboxKind(entry.kind).value),
        "data": encode_data(entry.data),
        "error": sanitize_error(reason),
        "quarantined_at": now,
    }


@dataclass(frozen=True, slots=True)
class QuarantinedEntry:
    """One refused outbox entry, as ``raftsched db quarantine list`` shows it."""

    seq: int
    kind: str
    data: dict[str, Any]
    error: str
    quarantined_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> QuarantinedEntry:
        return cls(
            seq=int(row["seq"]),
            kind=str(row["kind"]),
            data=decode_data(row["data"]),
            error=str(row["error"]),
            quarantined_at=row["quarantined_at"],
        )

    @property
    def entry(self) -> OutboxEntry:
        """The outbox entry as it was refused."""
        return OutboxEntry(seq=self.seq, kind=OutboxKind(self.kind), data=self.data)

    @property
    def key(self) -> dict[str, Any]:
        """The entry's identifying fields (dag_id, run_id, task_id, ...) that it has."""
        return {name: self.data[name] for name in KEY_FIELDS if name in self.data}


# -- the table ------------------------------------------------------------------------------


def put(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert quarantine rows (a seq already there is kept as it is)."""
    insert_ignore(conn, t.outbox_quarantine, rows)


def load(conn: Connection, seqs: Sequence[int] | None = None) -> list[QuarantinedEntry]:
    """Quarantined entries in seq order: all of them, or those among ``seqs``."""
    table = t.outbox_quarantine
    query = sa.select(table).order_by(table.c.seq)
    if seqs is not None:
        query = query.where(table.c.seq.in_(list(seqs)))
    return [QuarantinedEntry.from_row(row) for row in conn.execute(query).mappings()]


def count(conn: Connection) -> int:
    return int(
        conn.execute(sa.select(sa.func.count()).select_from(t.outbox_quarantine)).scalar_one()
    )


def delete(conn: Connection, seq: int) -> None:
    conn.execute(sa.delete(t.outbox_quarantine).where(t.outbox_quarantine.c.seq == seq))


def record_error(conn: Connection, seq: int, reason: str) -> None:
    """Keep the entry, with the database's latest refusal."""
    table = t.outbox_quarantine
    conn.execute(sa.update(table).where(table.c.seq == seq).values(error=sanitize_error(reason)))
