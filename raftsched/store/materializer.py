"""The outbox materializer (docs/architecture.md §5): committed outbox entries → DB, exactly once.

Contract of :meth:`Materializer.write` (the same for :class:`MemoryMaterializer` in
``store.memory``):

- One transaction: lock the watermark row, skip entries with ``seq <= watermark``, apply the
  rest, advance the watermark to the last seq of the batch, commit. Either the batch's new
  entries land (written or quarantined) with the watermark, or nothing does.
- The new entries must continue the watermark without a gap (``watermark + 1, + 2, ...``);
  otherwise :class:`OutboxGap` is raised and nothing is written. A gap is a bug: an entry
  would be lost.
- A row the database refuses never stops the pipeline: a refused batch is bisected (each
  half in a savepoint of the same transaction, O(k log n) savepoints for k refused entries
  out of n) down to the entries it refuses; everything else is written in seq order and each
  refused entry goes to the ``outbox_quarantine`` table with the DB's error (see
  ``store.quarantine``), the watermark moving past it. Only refusals of the row are
  quarantined; an unreachable DB is never (it raises StoreUnavailable, below).
- Idempotent: writing a batch again (another leader, a retry after an unknown commit
  outcome) writes nothing twice, because the watermark says it is already there.
- Within a batch, entries take effect in seq order: a later upsert of the same key wins.
- An unreachable database raises :class:`~raftsched.errors.StoreUnavailable`: back off and
  retry later with the same (or a longer) batch.
- Thread-safe; concurrent writers (even on other machines) serialize on the watermark lock.

:meth:`Materializer.retry_quarantined` writes quarantined entries again, as they were (for
``raftsched db quarantine retry``), but never over a newer row unless forced: every upserted
row keeps the seq of the entry that wrote it (``tables.OUTBOX_SEQ``; ``store.quarantine_retry``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from raftsched.core.model import OutboxEntry, OutboxKind, parse_utc
from raftsched.core.rows import (
    AuditRow,
    CallbackJobRow,
    DagRow,
    ImportErrorsRow,
    LogRow,
    RunRow,
    SecretRow,
    TaskRow,
)
from raftsched.errors import OutboxGap, StoreUnavailable
from raftsched.store import asset_rows, bulk
from raftsched.store import quarantine as q
from raftsched.store import tables as t
from raftsched.store.engine import translate_errors, write_transaction
from raftsched.store.upsert import insert_ignore, upsert

if TYPE_CHECKING:
    from raftsched.store.quarantine_retry import RetryOutcome

log = logging.getLogger(__name__)

_LOGGED_REFUSALS = 5  # per batch; a systematic refusal must not flood the log
_SYSTEMATIC = 8  # a batch of at least this many, every entry refused: the DB's fault


def pending(entries: Sequence[OutboxEntry], watermark: int) -> list[OutboxEntry]:
    """The entries after ``watermark`` in seq order; raise OutboxGap unless contiguous."""
    new = sorted((e for e in entries if e.seq > watermark), key=lambda e: e.seq)
    for offset, entry in enumerate(new, start=1):
        if entry.seq != watermark + offset:
            raise OutboxGap(watermark, [e.seq for e in new])
    return new


class Materializer:
    """Writes outbox entries to the metadata DB behind the watermark row. See module doc."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def watermark(self) -> int:
        """The seq of the last entry written (0 for a fresh database)."""
        with translate_errors(self.engine), self.engine.connect() as conn:
            return _read_watermark(conn, lock=False)

    def write(self, entries: Sequence[OutboxEntry]) -> int:
        """Write the entries after the watermark in one transaction; return the new watermark.

        Entries the DB refuses are quarantined instead (module doc); the watermark still
        moves to the batch's last seq.
        """
        with write_transaction(self.engine) as conn:
            watermark = _read_watermark(conn, lock=True)
            new = pending(entries, watermark)
            if not new:
                return watermark
            last = new[-1].seq
            refused = _apply_isolating(conn, new)
            if len(refused) == len(new) >= _SYSTEMATIC:
                # Every row refused: the database (its schema, a permission, a closed
                # connection) is at fault, not the rows. Quarantining all would acknowledge
                # them and drop them from the outbox; back off and retry instead.
                raise StoreUnavailable(
                    f"the metadata database refused all {len(new)} outbox entries"
                    f" {new[0].seq}..{last} ({refused[0][1]}); this looks like a problem of the"
                    " database rather than of the rows: check its schema (`raftsched db"
                    " check`) and permissions"
                )
            if refused:
                now = datetime.now(UTC)
                q.put(conn, [q.quarantine_row(e, reason, now) for e, reason in refused])
            conn.execute(
                sa.update(t.materialize_watermark)
                .where(t.materialize_watermark.c.id == t.WATERMARK_ROW_ID)
                .values(seq=last, updated_at=datetime.now(UTC))
            )
        _log_refused(refused)
        log.debug("materialized outbox %d..%d", new[0].seq, last)
        return last

    # -- the quarantine ----------------------------------------------------------------------

    def quarantined_count(self) -> int:
        """How many refused entries are in quarantine."""
        with translate_errors(self.engine), self.engine.connect() as conn:
            return q.count(conn)

    def quarantined(self, seqs: Sequence[int] | None = None) -> list[q.QuarantinedEntry]:
        """Quarantined entries in seq order (all, or those among ``seqs``)."""
        with translate_errors(self.engine), self.engine.connect() as conn:
            return q.load(conn, seqs)

    def retry_quarantined(
        self, seqs: Sequence[int] | None = None, *, force: bool = False
    ) -> list[RetryOutcome]:
        """``store.quarantine_retry.retry``: write quarantined entries again, never over a
        newer row unless ``force``."""
        from raftsched.store.quarantine_retry import retry  # it builds on this module

        return retry(self, seqs, force=force)


def _apply_isolating(
    conn: Connection, entries: Sequence[OutboxEntry]
) -> list[tuple[OutboxEntry, str]]:
    """Apply ``entries`` in seq order, each try in a savepoint; return the refused ones.

    A refused run of entries is split in halves, each tried on its own (left first, so seq
    order holds), down to single entries: k refused entries out of n cost O(k log n) tries.
    Errors that are not refusals of a row (``quarantine.refusal_reason``) propagate.
    """
    reason = _try_apply(conn, entries)
    if reason is None:
        return []
    if len(entries) == 1:
        return [(entries[0], reason)]
    middle = len(entries) // 2
    return _apply_isolating(conn, entries[:middle]) + _apply_isolating(conn, entries[middle:])


def _log_refused(refused: Sequence[tuple[OutboxEntry, str]]) -> None:
    """One warning per refused entry, up to _LOGGED_REFUSALS per batch, then a summary."""
    for entry, reason in refused[:_LOGGED_REFUSALS]:
        log.warning(
            "the metadata database refused outbox entry %d (%s): %s; it is quarantined,"
            " see `raftsched db quarantine list`",
            entry.seq,
            entry.kind,
            reason,
        )
    if len(refused) > _LOGGED_REFUSALS:
        log.warning(
            "%d more outbox entries of this batch were refused and quarantined (seqs %d..%d)",
            len(refused) - _LOGGED_REFUSALS,
            refused[_LOGGED_REFUSALS][0].seq,
            refused[-1][0].seq,
        )


def _try_apply(conn: Connection, entries: Sequence[OutboxEntry]) -> str | None:
    """Apply in a savepoint; None when written, the DB's reason when it refused the rows."""
    try:
        with conn.begin_nested():
            _apply(conn, entries)
    except Exception as err:
        reason = q.refusal_reason(err)
        if reason is None:
            raise
        return reason
    return None


def _read_watermark(conn: Connection, *, lock: bool) -> int:
    table = t.materialize_watermark
    query = sa.select(table.c.seq).where(table.c.id == t.WATERMARK_ROW_ID)
    if lock and conn.dialect.name == "postgresql":
        query = query.with_for_update()
    seq = conn.execute(query).scalar_one_or_none()
    if seq is None and lock:  # the migration seeds the row; tolerate a hand-made database
        insert_ignore(conn, table, [{"id": t.WATERMARK_ROW_ID, "seq": 0, "updated_at": None}])
        seq = conn.execute(query).scalar_one()
    return int(seq or 0)


def _apply(conn: Connection, entries: Sequence[OutboxEntry]) -> None:
    """Apply entries as if one by one in seq order, but in one statement per kind.

    Every upsert writes a whole row and every key belongs to one table, so keeping the last
    entry per key and applying kinds in a fixed order gives the same final rows as applying
    the entries one by one. IMPORT_ERRORS replaces the table: only the last one matters.
    On PostgreSQL a table's rows are one ``unnest`` statement (``store.bulk``; 12,000 runs
    in process: 72 -> 32 us of the writer's CPU per run, PostgreSQL's 36 -> 20 us); rows it
    does not take go the executemany way.
    """
    by_kind: dict[OutboxKind, list[OutboxEntry]] = {kind: [] for kind in OutboxKind}
    for entry in entries:
        by_kind[OutboxKind(entry.kind)].append(entry)
    bulk_ok = conn.dialect.name == "postgresql"  # one statement per table (store.bulk)
    for kind, (table, to_row) in UPSERTS.items():
        rows = _last_per_key((_versioned(to_row(e.data), e.seq) for e in by_kind[kind]), table)
        if kind is OutboxKind.SECRET:  # a deleted variable or connection: its row goes
            gone = [row for row in rows if row["ciphertext"] is None]
            rows = [row for row in rows if row["ciphertext"] is not None]
            _delete_secrets(conn, gone)
        if kind is OutboxKind.POOL:  # a deleted pool: its row goes
            gone = [row for row in rows if row["slots"] is None]
            rows = [row for row in rows if row["slots"] is not None]
            for row in gone:
                conn.execute(sa.delete(t.pool).where(t.pool.c.name == row["name"]))
        if not (bulk_ok and bulk.write(conn, table, rows, update=True)):
            upsert(conn, table, rows)
    logs = _last_per_key((log_row(e.data) for e in by_kind[OutboxKind.TASK_LOG]), t.task_log)
    if not (bulk_ok and bulk.write(conn, t.task_log, logs, update=False)):
        insert_ignore(conn, t.task_log, logs)  # a chunk is immutable once written
    audits = [audit_row(e.data) for e in by_kind[OutboxKind.AUDIT]]
    if audits:
        insert_ignore(conn, t.audit_log, audits)  # a record is immutable once written
    if by_kind[OutboxKind.IMPORT_ERRORS]:
        _replace_import_errors(conn, by_kind[OutboxKind.IMPORT_ERRORS][-1].data)
    events = [asset_rows.event_row(e.data) for e in by_kind[OutboxKind.ASSET_EVENT]]
    if events:  # immutable once written, like audit records
        insert_ignore(conn, t.asset_event, events)
    links = [row for e in by_kind[OutboxKind.ASSET_RUN] for row in asset_rows.run_rows(e.data)]
    if links:
        insert_ignore(conn, t.asset_event_run, links)


def upsert_row(entry: OutboxEntry) -> dict[str, Any]:
    """The row an upserted entry writes, versioned with its seq (``tables.OUTBOX_SEQ``)."""
    return _versioned(UPSERTS[OutboxKind(entry.kind)][1](entry.data), entry.seq)


def _versioned(row: dict[str, Any], seq: int) -> dict[str, Any]:
    row[t.OUTBOX_SEQ] = seq
    return row


def _delete_secrets(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    table = t.secret
    for row in rows:
        conn.execute(sa.delete(table).where(table.c.kind == row["kind"], table.c.key == row["key"]))


def _last_per_key(rows: Iterable[dict[str, Any]], table: sa.Table) -> list[dict[str, Any]]:
    key = itemgetter(*[c.name for c in table.primary_key.columns])  # a tuple: 2+ columns
    return list({key(row): row for row in rows}.values())


# -- rows of each kind, as the tables hold them (core/rows.py; shared with store.memory) ----


def dag_row(d: dict[str, Any]) -> dict[str, Any]:
    return DagRow.from_wire(d).columns()


def run_row(d: dict[str, Any]) -> dict[str, Any]:
    return RunRow.from_wire(d).columns()


def task_row(d: dict[str, Any]) -> dict[str, Any]:
    return TaskRow.from_wire(d).columns()


def log_row(d: dict[str, Any]) -> dict[str, Any]:
    return LogRow.from_wire(d).columns()


def secret_row(d: dict[str, Any]) -> dict[str, Any]:
    return SecretRow.from_wire(d).columns()


def callback_job_row(d: dict[str, Any]) -> dict[str, Any]:
    return CallbackJobRow.from_wire(d).columns()


def audit_row(d: dict[str, Any]) -> dict[str, Any]:
    return AuditRow.from_wire(d).columns()


def import_error_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The import_error table's new content (the last error per file wins)."""
    return ImportErrorsRow.from_wire(data).columns()


def _replace_import_errors(conn: Connection, data: dict[str, Any]) -> None:
    rows = import_error_rows(data)
    conn.execute(sa.delete(t.import_error))
    if rows:
        conn.execute(sa.insert(t.import_error), rows)


def skipped_row(d: dict[str, Any]) -> dict[str, Any]:
    return {
        "dag_id": d["dag_id"],
        "last_slot": parse_utc(d["last"]),
        "first_slot": parse_utc(d["first"]),
        "slots": int(d["count"]),
        "reason": d["reason"],
        "decided_at": parse_utc(d["at"]),
    }


def pool_row(d: dict[str, Any]) -> dict[str, Any]:
    """A POOL entry's row (core/handlers_pools.pool_row; slots None: deleted)."""
    return {
        "name": d["name"],
        "slots": None if d.get("slots") is None else int(d["slots"]),
        "description": str(d.get("description") or ""),
        "updated_at": parse_utc(d.get("updated_at")),
    }


RowBuilder = Callable[[dict[str, Any]], dict[str, Any]]

# Kinds applied as upserts, in this order (parents before children, for readers' sake).
UPSERTS: dict[OutboxKind, tuple[sa.Table, RowBuilder]] = {
    OutboxKind.DAG: (t.dags, dag_row),
    OutboxKind.DAG_RUN: (t.dag_run, run_row),
    OutboxKind.TASK_INSTANCE: (t.task_instance, task_row),
    OutboxKind.SECRET: (t.secret, secret_row),  # ciphertext None: the row is deleted
    OutboxKind.CALLBACK_JOB: (t.callback_job, callback_job_row),
    OutboxKind.SKIPPED_SLOTS: (t.skipped_slots, skipped_row),
    OutboxKind.POOL: (t.pool, pool_row),  # slots None: the row is deleted
}
