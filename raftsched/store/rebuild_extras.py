"""The Raft-only parts of a rebuilt state, from the metadata DB (``store.rebuild``).

The audit log's newest records (table ``audit_log``, ``core.audit``) come back as the window
the state holds, so record ids go on after the DB's last one instead of starting again at 1
(an insert-only row of a reused id would be dropped).

Each DAG's newest skipped-slot ranges (table ``skipped_slots``, ``core/slot_policy.py``) come
back as the ranges its record keeps (``limits.MAX_SKIP_RECORDS``), so ``dags explain`` answers
as before the rebuild, and the schedule goes on after the newest one (a range after the last
run is not decided again).

Variables, connections and callback jobs reach the DB as outbox entries (``core.persisted``,
tables ``secret`` and ``callback_job``); these read them back in the snapshot layout of
``core.secret_table`` and ``core.callback_table``. Ciphertext is copied as it is: nothing
here can (or tries to) decrypt.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from raftsched.core.callback_table import (
    DONE_RETENTION_SECONDS,
    MAX_DONE_JOBS,
    MAX_OPEN_JOBS,
    PENDING,
    RUNNING,
    CallbackJob,
)
from raftsched.core.limits import MAX_AUDIT_RECORDS, MAX_SKIP_RECORDS
from raftsched.core.model import utc_iso
from raftsched.store import tables as t

log = logging.getLogger(__name__)


def read_secrets(conn: sa.Connection) -> list[list[Any]]:
    """The secret table as ``SecretTable.to_list()`` makes it (ciphertext untouched)."""
    s = t.secret
    query = sa.select(s).order_by(s.c.kind, s.c.key)
    return [
        [row.kind, row.key, row.ciphertext, row.description or "", utc_iso(row.updated_at)]
        + ([row.dags.split(",")] if row.dags else [])
        for row in conn.execute(query)
        if row.updated_at is not None
    ]


def read_callbacks(
    conn: sa.Connection, now: datetime, kept: set[tuple[str, str]]
) -> dict[str, Any] | None:
    """``CallbackTable.to_dict()`` from the callback_job table, or None when it is empty."""
    cb = t.callback_job
    top = conn.execute(sa.select(sa.func.max(cb.c.seq))).scalar()
    if top is None:
        return None
    since = now - timedelta(seconds=DONE_RETENTION_SECONDS)
    query = (
        sa.select(cb.c.job_id, cb.c.state, cb.c.job)
        .where(sa.or_(cb.c.state.in_((PENDING, RUNNING)), cb.c.finished_at >= since))
        .order_by(cb.c.seq)
    )
    open_jobs: list[CallbackJob] = []
    done: list[CallbackJob] = []
    for row in conn.execute(query):
        try:
            job = CallbackJob.from_list(list(row.job))
        except Exception as err:  # a row this release cannot read: say so, go on
            log.warning("callback job %s: unreadable (%s): left out", row.job_id, err)
            continue
        (open_jobs if job.state in (PENDING, RUNNING) else done).append(job)
    open_jobs = open_jobs[-MAX_OPEN_JOBS:]
    done = sorted(done, key=lambda j: (j.finished_at or now, j.seq))[-MAX_DONE_JOBS:]
    alerted = {
        (job.dag_id, job.run_id): job.created_at
        for job in [*open_jobs, *done]
        if job.event == "deadline" and (job.dag_id, job.run_id) in kept
    }
    return {
        "seq": int(top),
        "dropped": 0,
        "open": [job.to_list() for job in open_jobs],
        "done": [job.to_list() for job in done],
        "alerted": [[d, r, utc_iso(when)] for (d, r), when in alerted.items()],
    }


def read_audit(conn: sa.Connection) -> list[list[Any]]:
    """The newest audit records as ``AuditLog.to_list()`` makes them (oldest first)."""
    a = t.audit_log
    query = sa.select(a).order_by(a.c.id.desc()).limit(MAX_AUDIT_RECORDS)
    rows = list(conn.execute(query))[::-1]
    names = ("id", "log_index", "at", "actor", "action", "dag_id", "run_id", "detail")
    return [[utc_iso(row.at) if n == "at" else getattr(row, n) for n in names] for row in rows]


def read_skipped(conn: sa.Connection) -> dict[str, list[dict[str, Any]]]:
    """Each DAG's newest ``MAX_SKIP_RECORDS`` skipped ranges, oldest first, in the snapshot
    layout of ``SkippedSlots.to_dict()`` (one windowed query: the table keeps every range)."""
    s = t.skipped_slots
    newest = (
        sa.func.row_number().over(partition_by=s.c.dag_id, order_by=s.c.last_slot.desc())
    ).label("newest")
    ranked = sa.select(s, newest).subquery()
    query = (
        sa.select(ranked)
        .where(ranked.c.newest <= MAX_SKIP_RECORDS)
        .order_by(ranked.c.dag_id, ranked.c.last_slot)
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for row in conn.execute(query):
        out.setdefault(row.dag_id, []).append(
            {
                "first": utc_iso(_aware(row.first_slot)),
                "last": utc_iso(_aware(row.last_slot)),
                "count": int(row.slots),
                "reason": str(row.reason),
                "at": utc_iso(_aware(row.decided_at)),
            }
        )
    return out


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def read_pools(conn: sa.Connection) -> list[list[Any]]:
    """The pools as ``PoolTable.to_list()`` makes them (core/pool_table.py), by name."""
    p = t.pool
    return [
        [row.name, int(row.slots), row.description or "", utc_iso(row.updated_at)]
        for row in conn.execute(sa.select(p).order_by(p.c.name))
        if row.updated_at is not None
    ]
