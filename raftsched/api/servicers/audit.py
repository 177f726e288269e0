"""ClusterService.ListAuditRecords: the audit log (core/audit.py), newest first.

Records come from two places that overlap: the window every replica holds (the newest
MAX_AUDIT_RECORDS, including those the materializer has not written yet) and the metadata
DB's ``audit_log`` table (every record written so far). A page is their union by id, so a
record is never missing nor shown twice whichever node answers, before or after a failover.
A node without a DB answers from its window alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from raftsched.api.gen import cluster_pb2
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.context import ApiContext
from raftsched.core.limits import MAX_ACTOR_CHARS
from raftsched.core.rows import AuditRow
from raftsched.errors import StoreUnavailable
from raftsched.store import audit_log

DEFAULT_LIMIT = 100
MAX_LIMIT = 1_000


def list_audit_records(ctx: ApiContext, request: Any) -> Any:
    limit = min(MAX_LIMIT, request.limit) if request.limit > 0 else DEFAULT_LIMIT
    before = max(0, int(request.before_id))
    since = bounds.timestamp(request, "since")
    dag_id = bounds.ident("dag_id", request.dag_id, required=False)
    actor = bounds.text("actor", request.actor, MAX_ACTOR_CHARS)

    def wanted(row: AuditRow) -> bool:
        return (
            (before == 0 or row.id < before)
            and (since is None or (row.at is not None and row.at >= since))
            and (not dag_id or row.dag_id == dag_id)
            and (not actor or audit_log.matches_actor(row.actor, actor))
        )

    live, freshness = ctx.read(lambda st: [row for row in st.audit if wanted(row)])
    by_id = {row.id: row for row in live}
    try:
        engine = ctx.require_engine()
        stored = audit_log.list_records(
            engine, limit=limit, before_id=before, since=since, dag_id=dag_id, actor=actor
        )
        by_id.update((row.id, row) for row in stored if row.id not in by_id)
    except StoreUnavailable:
        pass  # no DB on this node: the window alone
    rows = sorted(by_id.values(), key=lambda row: row.id, reverse=True)[:limit]
    return cluster_pb2.ListAuditRecordsResponse(
        records=[_record(row) for row in rows], freshness=freshness
    )


def _record(row: AuditRow) -> cluster_pb2.AuditRecord:
    return cluster_pb2.AuditRecord(
        id=row.id,
        log_index=row.log_index,
        at=convert.ts(row.at) if isinstance(row.at, datetime) else None,
        actor=row.actor,
        action=row.action,
        dag_id=row.dag_id,
        run_id=row.run_id,
        detail=row.detail,
    )
