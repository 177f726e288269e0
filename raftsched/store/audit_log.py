"""Reading the audit log's history (table ``audit_log``, written by the materializer from AUDIT
outbox entries, core/audit.py), newest first, by id: a page is a range of the primary key,
filtered, so it costs O(page) at any history size for the unfiltered view."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from raftsched.core.rows import AuditRow
from raftsched.store import tables as t


def matches_actor(actor: str, wanted: str) -> bool:
    """The actor exactly, or the user part of "<user> via <token name>"."""
    return actor == wanted or actor.startswith(f"{wanted} via ")


def list_records(
    engine: Any,
    *,
    limit: int,
    before_id: int = 0,
    since: datetime | None = None,
    dag_id: str = "",
    actor: str = "",
) -> list[AuditRow]:
    """At most ``limit`` records, newest first, with ids below ``before_id`` (0: any)."""
    table = t.audit_log
    query = sa.select(table).order_by(table.c.id.desc()).limit(limit)
    if before_id > 0:
        query = query.where(table.c.id < before_id)
    if since is not None:
        query = query.where(table.c.at >= since)
    if dag_id:
        query = query.where(table.c.dag_id == dag_id)
    if actor:
        query = query.where(
            sa.or_(
                table.c.actor == actor, table.c.actor.startswith(f"{actor} via ", autoescape=True)
            )
        )
    with engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    return [AuditRow(**dict(row)) for row in rows]
