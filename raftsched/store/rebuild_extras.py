"""The Raft-only parts of a rebuilt state, from the metadata DB (``store.rebuild``).

The audit log's newest records (table ``audit_log``, ``core.audit``) come back as the window
the state holds, so record ids go on after the DB's last one instead of starting again at 1
(an insert-only row of a reused id would be dropped).

Variables, connections and callback jobs reach the DB as outbox entries (``core.persisted``,
tables ``secret`` and ``callback_job``); these read them back in the snapshot layout of
``core.secret_table`` and ``core.callback_table``. Ciphertext is copied as it is: nothing
here can (or tries to) decrypt.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
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
from raftsched.core.limits import MAX_AUDIT_RECORDS
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
