"""ListAuditRecords answers as plain dicts: one shape for ``raftsched audit``, the web UI's
audit page and ``GET /api/v1/audit``."""

from __future__ import annotations

from datetime import UTC
from typing import Any


def audit_dicts(response: Any) -> list[dict[str, Any]]:
    """Each record: id, log_index, at (aware UTC datetime or None), actor, action, dag_id,
    run_id, detail ("" when none)."""
    return [
        {
            "id": r.id,
            "log_index": r.log_index,
            "at": r.at.ToDatetime(tzinfo=UTC) if r.HasField("at") else None,
            "actor": r.actor,
            "action": r.action,
            "dag_id": r.dag_id,
            "run_id": r.run_id,
            "detail": r.detail,
        }
        for r in response.records
    ]
