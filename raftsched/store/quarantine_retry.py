"""``raftsched db quarantine retry``: quarantined outbox entries written again, never over a
newer row unless forced (docs/architecture.md §5).

An entry sits in quarantine while later entries go on: one of them may have written a newer
row of the same key (a task attempt's later state) after it was refused. Every upserted row
keeps the seq of the entry that wrote it (``tables.OUTBOX_SEQ``, migration 0005), so
:func:`newer_row` can tell: an entry older than its key's row, one whose row cannot say
(written before 0005), and an import-error list (it replaces the whole table, which later
parses rewrote) stay in quarantine with the reason, unless ``force``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from raftsched.core.model import OutboxEntry, OutboxKind
from raftsched.store import quarantine as q
from raftsched.store import tables as t
from raftsched.store.engine import write_transaction
from raftsched.store.materializer import UPSERTS, _read_watermark, _try_apply, upsert_row

if TYPE_CHECKING:
    from raftsched.store.materializer import Materializer


@dataclass(frozen=True, slots=True)
class RetryOutcome:
    """What ``retry`` did with one seq: written (and out of quarantine), or the database's
    refusal (still quarantined), or a newer row in the way (still quarantined, untouched),
    or not in quarantine at all."""

    seq: int
    kind: str | None  # None: no such seq in quarantine
    written: bool
    error: str | None
    newer: bool = False  # not written: the DB holds a newer row of its key (force writes it)


def retry(
    m: Materializer, seqs: Sequence[int] | None = None, *, force: bool = False
) -> list[RetryOutcome]:
    """Write quarantined entries again (all, or ``seqs``), each in its own transaction.

    Each is written as it was, with upsert semantics, unless :func:`newer_row` says a newer
    row is in the way (then it stays, with ``newer`` set) and not ``force``. Written: its
    quarantine row is deleted. Refused again: it stays, with the new error. The watermark is
    not touched (its row is locked, so no materializer writes between the check and the
    write).
    """
    wanted = None if seqs is None else sorted(set(seqs))
    found = {e.seq: e for e in m.quarantined(wanted)}
    outcomes = []
    for seq in wanted if wanted is not None else sorted(found):
        entry = found.get(seq)
        if entry is None:
            outcomes.append(RetryOutcome(seq, None, False, "not in quarantine"))
        else:
            outcomes.append(_retry_one(m, entry, force))
    return outcomes


def _retry_one(m: Materializer, entry: q.QuarantinedEntry, force: bool) -> RetryOutcome:
    with write_transaction(m.engine) as conn:
        _read_watermark(conn, lock=True)  # serializes with the materializer
        newer = None if force else newer_row(conn, entry.entry)
        if newer is not None:
            return RetryOutcome(entry.seq, entry.kind, False, newer, newer=True)
        reason = _try_apply(conn, [entry.entry])
        if reason is None:
            q.delete(conn, entry.seq)
        else:
            q.record_error(conn, entry.seq, reason)
    return RetryOutcome(entry.seq, entry.kind, reason is None, reason)


def newer_row(conn: Connection, entry: OutboxEntry) -> str | None:
    """Why writing ``entry`` again could overwrite a newer row, or None when it cannot.

    An upsert's key holds a row written from a later seq, or from before rows carried their
    seq (migration 0005: it may be newer); an import-error list replaces the whole table,
    which later parses rewrote. A log chunk never overwrites (insert-or-skip).
    """
    kind = OutboxKind(entry.kind)
    if kind is OutboxKind.IMPORT_ERRORS:
        return (
            "an import-error list replaces the whole import_error table, which every later"
            " parse rewrote (the leader writes it again at its next parse)"
        )
    if kind not in UPSERTS:
        return None
    table = UPSERTS[kind][0]
    try:
        row = upsert_row(entry)
    except (KeyError, TypeError, ValueError):
        return None  # not a row at all: the write refuses it with the reason
    keys = list(table.primary_key.columns)
    query = sa.select(table.c[t.OUTBOX_SEQ]).where(*(c == row[c.name] for c in keys))
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    found = conn.execute(query).first()
    if found is None:
        return None
    key = ", ".join(f"{c.name}={row[c.name]!r}" for c in keys)
    written_by = found[0]
    if written_by is None:
        return (
            f"the {table.name} row ({key}) was written before rows recorded their outbox seq"
            " (migration 0005), so it may be newer than this entry"
        )
    if int(written_by) > entry.seq:
        return (
            f"the {table.name} row ({key}) was written from outbox seq {written_by}, newer"
            f" than this entry (seq {entry.seq})"
        )
    return None
