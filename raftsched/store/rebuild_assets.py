"""Asset events for ``cluster rebuild --from-db`` (§21): the asset table as a snapshot holds
it (core/asset_table.py), from ``asset_event``: the last event id (so new events never reuse
an id the DB holds), each asset's event count and newest events, and the newest client event
ids (a retried event stays a duplicate). Events queued for a consumer whose condition was
not met yet are not in the DB: a rebuilt cluster starts those queues empty. An unfinished
asset-triggered run gets back the events it carried (``asset_event_run``). Each active DAG's
asset watchers are held again, unleased (their file versions already fired are not in the DB:
a file watcher fires once more for the file in place)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from raftsched.core import asset_watchers as aw
from raftsched.core.asset_commands import MAX_RUN_EVENTS
from raftsched.core.asset_table import MAX_ASSETS, MAX_EVENT_KEYS, MAX_EVENTS_KEPT
from raftsched.core.model import utc_iso
from raftsched.store import tables as t


def _event(row: Any) -> dict[str, Any]:
    """core/asset_table.AssetEvent.to_dict() of a row."""
    return {
        "id": int(row.id),
        "uri": row.uri,
        "extra_json": row.extra,
        "timestamp": utc_iso(row.timestamp),
        "source_dag_id": row.source_dag_id,
        "source_run_id": row.source_run_id,
        "source_task_id": row.source_task_id,
        "source_try": int(row.source_try),
        "key": row.event_key,
        "actor": row.actor,
    }


def read_assets(conn: sa.Connection) -> dict[str, Any] | None:
    """The snapshot's ``assets`` (None: no event ever)."""
    e = t.asset_event
    seq = conn.execute(sa.select(sa.func.max(e.c.id))).scalar()
    if seq is None:
        return None
    newest = sa.func.max(e.c.id).label("newest")
    counts = conn.execute(
        sa.select(e.c.uri, sa.func.count().label("n"), newest)
        .group_by(e.c.uri)
        .order_by(newest.desc())
        .limit(MAX_ASSETS)
    ).all()
    assets = []
    for uri, count, _newest in reversed(counts):  # oldest asset first, as the table adds them
        rows = conn.execute(
            sa.select(e).where(e.c.uri == uri).order_by(e.c.id.desc()).limit(MAX_EVENTS_KEPT)
        ).all()
        events = [_event(row) for row in reversed(rows)]
        assets.append([uri, int(count), [list(ev.values()) for ev in events]])
    keys = conn.execute(
        sa.select(e.c.event_key, e.c.id)
        .where(e.c.event_key != "")
        .order_by(e.c.id.desc())
        .limit(MAX_EVENT_KEYS)
    ).all()
    return {
        "seq": int(seq),
        "assets": assets,
        "queued": [],
        "keys": [[key, int(event_id)] for key, event_id in reversed(keys)],
    }


def run_events(conn: sa.Connection, runs: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The events each asset-triggered run of ``runs`` carried, as DagRun.asset_events_json."""
    out: dict[tuple[str, str], str] = {}
    link, e = t.asset_event_run, t.asset_event
    for dag_id, run_id in runs:
        rows = conn.execute(
            sa.select(e)
            .join(link, link.c.event_id == e.c.id)
            .where(link.c.dag_id == dag_id, link.c.run_id == run_id)
            .order_by(e.c.id)
        ).all()
        if rows:
            events = [_event(row) for row in rows[-MAX_RUN_EVENTS:]]
            out[(dag_id, run_id)] = json.dumps(events, separators=(",", ":"), ensure_ascii=False)
    return out


def watcher_triggers(
    specs: dict[str, dict[str, Any]], dags: list[dict[str, Any]], now: datetime
) -> dict[str, Any] | None:
    """The trigger table (its snapshot form) of the active DAGs' asset watchers, or None."""
    held = []
    for dag in dags:
        spec = specs[dag["spec_hash"]]
        if dag["active"] and spec.get("asset_watchers"):
            for watcher in aw.parse(spec["asset_watchers"]):
                held.append(aw.trigger_of(dag["dag_id"], watcher, spec["fileloc"], now).to_list())
    return {"triggers": held} if held else None
