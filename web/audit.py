"""The audit page (admins): who triggered, paused, cleared, marked, backfilled or changed a
variable or connection, and when, newest first, filtered by DAG and actor; ``/audit.json`` is
the same data. Read through the gateway's client (``ClusterService.ListAuditRecords``,
``raftsched.api.audit_view``), which needs the admin role on the cluster as well."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template, request
from raftsched.web.auth import role_required
from raftsched.web.gateway import Gateway, gateway

from raftsched.api.audit_view import audit_dicts
from raftsched.api.gen import cluster_pb2

bp = Blueprint("audit", __name__)
MAX_FILTER_CHARS = 200  # a DAG id or an actor; the cluster bounds them again


def list_audit(
    via: Gateway, *, dag_id: str = "", actor: str = "", before_id: int = 0, limit: int = 100
) -> list[dict[str, Any]]:
    """Records through ``via`` (the pages' gateway, or the REST caller's)."""
    query = cluster_pb2.ListAuditRecordsRequest(
        dag_id=dag_id, actor=actor, before_id=before_id, limit=limit
    )
    return audit_dicts(via._call("cluster", "ListAuditRecords", query))


def _filters() -> dict[str, Any]:
    before = request.args.get("before_id", "")
    return {
        "dag_id": request.args.get("dag_id", "")[:MAX_FILTER_CHARS],
        "actor": request.args.get("actor", "")[:MAX_FILTER_CHARS],
        "before_id": int(before) if before.isdigit() and len(before) < 19 else 0,
    }


@bp.get("/audit")
@role_required("admin")
def page() -> Any:
    filters = _filters()
    return render_template("audit.html", records=list_audit(gateway(), **filters), **filters)


@bp.get("/audit.json")
@role_required("admin")
def records_json() -> Any:
    return jsonify(list_audit(gateway(), **_filters()))
