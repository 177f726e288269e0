"""Asset messages as JSON-able data, for the CLI and the REST API (§21)."""

from __future__ import annotations

import json
from typing import Any

from raftsched.api.gen import asset_pb2


def event_dict(event: asset_pb2.AssetEvent) -> dict[str, Any]:
    """An AssetEvent message as data."""
    return {
        "id": event.id,
        "uri": event.uri,
        "extra": json.loads(event.extra_json or "{}"),
        "timestamp": (
            event.timestamp.ToDatetime().isoformat() + "+00:00"
            if event.HasField("timestamp")
            else None
        ),
        "source_dag_id": event.source_dag_id,
        "source_run_id": event.source_run_id,
        "source_task_id": event.source_task_id,
        "source_try": event.source_try,
        "event_id": event.event_id,
        "actor": event.actor,
    }


def summary_dict(summary: asset_pb2.AssetSummary) -> dict[str, Any]:
    """An AssetSummary message as data."""
    return {
        "uri": summary.uri,
        "producers": list(summary.producers),
        "consumers": list(summary.consumers),
        "event_count": summary.event_count,
        "last_event": event_dict(summary.last_event) if summary.HasField("last_event") else None,
        "queued_for": list(summary.queued_for),
        "watchers": list(summary.watchers),
    }
