"""BackfillDag through the caller's :class:`~raftsched.web.gateway.Gateway`: the backfill
form's call (``backfill.py``) and the REST API's (``POST /api/v1/dags/<dag>/backfill``).
A module of its own: ``gateway.py`` is at the line limit (tests/unit/test_layering.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from raftsched.web.gateway import Gateway
from raftsched.web.view_models import run_dict

from raftsched.api.gen import dag_pb2


def backfill(
    gw: Gateway,
    dag_id: str,
    start_date: datetime,
    end_date: datetime,
    conf: dict[str, Any],
    *,
    dry_run: bool = False,
) -> dict[str, Any]:
    """BackfillDag: the runs created (or, with ``dry_run``, that would be) and the skipped dates."""
    request = dag_pb2.BackfillDagRequest(dag_id=dag_id, conf_json=json.dumps(conf), dry_run=dry_run)
    request.start_date.FromDatetime(start_date.astimezone(UTC))
    request.end_date.FromDatetime(end_date.astimezone(UTC))
    response = gw._call("dags", "BackfillDag", request)
    return {
        "runs": [run_dict(r) for r in response.runs],
        "skipped": [s.ToDatetime(tzinfo=UTC) for s in response.skipped],
    }
