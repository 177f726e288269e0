"""Scheduler node heartbeats: each node upserts its own row every ``scheduler_heartbeat_sec``.

The cluster page and ``cluster status`` read them to show every node's role, term and Raft
indexes even when that node cannot be asked directly. Written outside the outbox on purpose:
a heartbeat is a node's own observation, not replicated state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from raftsched.store import tables as t
from raftsched.store.engine import translate_errors
from raftsched.store.upsert import upsert


@dataclass(frozen=True, slots=True)
class NodeHeartbeat:
    node_id: str
    address: str  # host:port of the node's Raft or gRPC endpoint, as the node reports it
    role: str  # "leader" | "follower" | "candidate" | ...
    term: int
    commit_index: int
    applied_index: int
    updated_at: datetime  # aware; when the node recorded this heartbeat
    last_leader_contact: datetime | None = None
    pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # JSON-able: outbox backlog, version...


def record_heartbeat(engine: Engine, heartbeat: NodeHeartbeat) -> None:
    """Insert or replace the node's row. Raises StoreUnavailable when the DB is unreachable."""
    row = {
        "node_id": heartbeat.node_id,
        "address": heartbeat.address,
        "role": heartbeat.role,
        "term": heartbeat.term,
        "commit_index": heartbeat.commit_index,
        "applied_index": heartbeat.applied_index,
        "last_leader_contact": heartbeat.last_leader_contact,
        "pid": heartbeat.pid,
        "updated_at": heartbeat.updated_at,
        "extra": dict(heartbeat.extra),
    }
    with translate_errors(engine), engine.begin() as conn:
        upsert(conn, t.node_heartbeat, [row])


def list_heartbeats(engine: Engine) -> list[NodeHeartbeat]:
    """Every node's last heartbeat, by node_id."""
    table = t.node_heartbeat
    with translate_errors(engine), engine.connect() as conn:
        rows = conn.execute(sa.select(table).order_by(table.c.node_id)).mappings().all()
    return [
        NodeHeartbeat(
            node_id=r["node_id"],
            address=r["address"],
            role=r["role"],
            term=r["term"],
            commit_index=r["commit_index"],
            applied_index=r["applied_index"],
            updated_at=r["updated_at"],
            last_leader_contact=r["last_leader_contact"],
            pid=r["pid"],
            extra=dict(r["extra"] or {}),
        )
        for r in rows
    ]


def remove_heartbeat(engine: Engine, node_id: str) -> bool:
    """Forget a node (after `cluster remove-node`); True if it had a row."""
    with translate_errors(engine), engine.begin() as conn:
        result = conn.execute(
            sa.delete(t.node_heartbeat).where(t.node_heartbeat.c.node_id == node_id)
        )
    return result.rowcount > 0
