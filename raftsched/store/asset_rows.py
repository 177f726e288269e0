"""Asset events in the metadata DB (§21): ``asset_event`` (every event; the Raft state keeps
only each asset's newest 100) and ``asset_event_run`` (which events each asset-triggered run
carried). Both are written once and never changed: ASSET_EVENT and ASSET_RUN outbox entries
are inserts (insert-or-skip, so a rewritten batch is harmless)."""

from __future__ import annotations

from typing import Any

from raftsched.core.model import parse_utc


def event_row(d: dict[str, Any]) -> dict[str, Any]:
    """An ASSET_EVENT entry's row (core/asset_table.AssetEvent.to_dict())."""
    return {
        "id": int(d["id"]),
        "uri": d["uri"],
        "extra": d["extra_json"],
        "timestamp": parse_utc(d["timestamp"]),
        "source_dag_id": d["source_dag_id"],
        "source_run_id": d["source_run_id"],
        "source_task_id": d["source_task_id"],
        "source_try": int(d["source_try"]),
        "event_key": d["key"],
        "actor": d["actor"],
    }


def run_rows(d: dict[str, Any]) -> list[dict[str, Any]]:
    """An ASSET_RUN entry's rows: one per event the run carried."""
    return [
        {"event_id": int(event_id), "dag_id": d["dag_id"], "run_id": d["run_id"]}
        for event_id in d["event_ids"]
    ]
