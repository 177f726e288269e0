"""The cluster's recent history through the caller's :class:`~raftsched.web.gateway.Gateway`:
one GetStatus with ``with_history`` (every node's own rings, raftsched/api/node_history.py).
A module of its own: ``gateway.py`` is at the line limit."""

from __future__ import annotations

from typing import Any

from raftsched.web.gateway import Gateway
from raftsched.web.view_models import node_dict, ts

from raftsched.api.gen import cluster_pb2


def cluster_history(gw: Gateway) -> dict[str, Any]:
    """{"nodes": [{node fields..., "events": [...], "samples": [...]}], "events": every
    node's events, newest first, each with its ``node_id``}."""
    request = cluster_pb2.GetStatusRequest(local_only=False, with_history=True)
    response = gw._call("cluster", "GetStatus", request)
    nodes, events = [], []
    for node in response.nodes:
        out = node_dict(node)
        out["events"] = [
            {
                "at": ts(e, "at"),
                "node_id": node.node_id,
                "kind": e.kind,
                "term": e.term,
                "detail": e.detail,
            }
            for e in node.history.events
        ]
        out["samples"] = [
            {
                "at": ts(s, "at"),
                "commit_index": s.commit_index,
                "apply_lag": s.apply_lag,
                "commit_latency_seconds": (
                    s.commit_latency_seconds if s.HasField("commit_latency_seconds") else None
                ),
            }
            for s in node.history.samples
        ]
        events += out["events"]
        nodes.append(out)
    events.sort(key=lambda e: e["at"], reverse=True)
    return {"nodes": nodes, "events": events}
