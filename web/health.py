"""``/health``: the load balancer's check. No login.

200 only when a leader with a quorum is reachable, 503 otherwise. The JSON says who leads,
the cluster's own view of every node (from whichever node answered), this webserver's view of
each configured server (can it reach it, and what that node says of itself), and the newest
heartbeat any node saw from a leader.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask import Blueprint, current_app, jsonify
from raftsched.web.gateway import Unavailable, gateway

bp = Blueprint("health", __name__)

NODE_KEYS = ("node_id", "role", "term", "commit_index", "applied_index", "has_quorum")
NODE_KEYS += ("last_leader_contact", "error")
SERVER_KEYS = ("address", "reachable", "node_id", "role", "term", "applied_index", "error")


@bp.get("/health")
def health() -> Any:
    gw = gateway()
    timeout = float(current_app.config["RAFTSCHED_HEALTH_TIMEOUT"])
    with ThreadPoolExecutor(max_workers=min(8, len(gw.servers) + 1)) as pool:
        probes = [pool.submit(gw.probe, address, timeout=timeout) for address in gw.servers]
        try:
            status: dict[str, Any] = gw.cluster_status(timeout=timeout)
            error = ""
        except Unavailable as err:
            status = {"nodes": [], "leader": None, "newest_heartbeat": None}
            error = err.message
        servers = [probe.result() for probe in probes]
    ok = status["leader"] is not None
    body = {
        "status": "ok" if ok else "unavailable",
        "leader": status["leader"],
        "newest_heartbeat": status["newest_heartbeat"],
        "nodes": [{k: node[k] for k in NODE_KEYS} for node in status["nodes"]],
        "servers": [{k: server.get(k) for k in SERVER_KEYS} for server in servers],
        "error": error or ("" if ok else "no node reports a leader with a quorum"),
    }
    return jsonify(body), 200 if ok else 503
