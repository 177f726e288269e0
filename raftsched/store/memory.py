"""An in-memory outbox sink with the contract of ``store.abc.OutboxSink``, for fast tests.

It keeps the rows the metadata DB would hold, keyed like the DB's primary keys and shaped by
the same row builders as the real materializer, so tests can look at "the DB" without one.
It does not enforce the DB's secondary unique constraints (one run per logical date); to
test what happens when the DB refuses a row, give it ``refuse``: a function that returns the
refusal text for an entry it should refuse (or None). Refused entries are quarantined as the
real materializer does: the rest is written, the watermark moves past them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from raftsched.core.model import OutboxEntry, OutboxKind
from raftsched.store import asset_rows
from raftsched.store import quarantine as q
from raftsched.store import tables as t
from raftsched.store.materializer import (
    UPSERTS,
    audit_row,
    import_error_rows,
    log_row,
    pending,
    upsert_row,
)


class MemoryMaterializer:
    """Thread-safe; ``rows(table_name)`` shows what was written, by primary key."""

    def __init__(self, refuse: Callable[[OutboxEntry], str | None] | None = None) -> None:
        self._refuse = refuse
        self._lock = threading.Lock()
        self._watermark = 0
        self._tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {
            name: {} for name in t.metadata.tables
        }

    def watermark(self) -> int:
        with self._lock:
            return self._watermark

    def write(self, entries: Sequence[OutboxEntry]) -> int:
        with self._lock:
            new = pending(entries, self._watermark)  # raises OutboxGap before any change
            for entry in new:
                reason = self._refuse(entry) if self._refuse is not None else None
                if reason is None:
                    self._apply(entry)
                else:
                    row = q.quarantine_row(entry, reason, datetime.now(UTC))
                    self._put(t.outbox_quarantine, row, replace=False)
            if new:
                self._watermark = new[-1].seq
            return self._watermark

    def quarantined_count(self) -> int:
        with self._lock:
            return len(self._tables[t.outbox_quarantine.name])

    def quarantined(self, seqs: Sequence[int] | None = None) -> list[q.QuarantinedEntry]:
        """Quarantined entries in seq order (all, or those among ``seqs``)."""
        with self._lock:
            rows = [row for _key, row in sorted(self._tables[t.outbox_quarantine.name].items())]
        wanted = None if seqs is None else set(seqs)
        return [
            q.QuarantinedEntry.from_row(row)
            for row in rows
            if wanted is None or row["seq"] in wanted
        ]

    def rows(self, table_name: str) -> list[dict[str, Any]]:
        """Copies of the rows of one table, in primary-key order."""
        with self._lock:
            table = self._tables[table_name]
            return [dict(table[key]) for key in sorted(table)]

    def _apply(self, entry: OutboxEntry) -> None:
        kind = OutboxKind(entry.kind)
        if kind is OutboxKind.SECRET and entry.data.get("ciphertext") is None:
            self._tables[t.secret.name].pop((entry.data["kind"], entry.data["key"]), None)
        elif kind is OutboxKind.POOL and entry.data.get("slots") is None:
            self._tables[t.pool.name].pop((entry.data["name"],), None)
        elif kind in UPSERTS:
            self._put(UPSERTS[kind][0], upsert_row(entry), replace=True)
        elif kind is OutboxKind.TASK_LOG:
            self._put(t.task_log, log_row(entry.data), replace=False)
        elif kind is OutboxKind.AUDIT:
            self._put(t.audit_log, audit_row(entry.data), replace=False)
        elif kind is OutboxKind.ASSET_EVENT:
            self._put(t.asset_event, asset_rows.event_row(entry.data), replace=False)
        elif kind is OutboxKind.ASSET_RUN:
            for row in asset_rows.run_rows(entry.data):
                self._put(t.asset_event_run, row, replace=False)
        elif kind is OutboxKind.IMPORT_ERRORS:
            self._tables[t.import_error.name].clear()
            for row in import_error_rows(entry.data):
                self._put(t.import_error, row, replace=True)

    def _put(self, table: sa.Table, row: dict[str, Any], *, replace: bool) -> None:
        key = tuple(row[c.name] for c in table.primary_key.columns)
        rows = self._tables[table.name]
        if replace or key not in rows:
            rows[key] = row
