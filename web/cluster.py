"""The cluster page: every node's role, term, indexes, DB watermark, outbox and last leader
contact, refreshed every few seconds from ``/cluster.json``; and how many outbox entries the
metadata DB refused and holds in quarantine (``quarantined``, from the leader; None when no
node reports it), with the command that shows them."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template
from raftsched.web import charts
from raftsched.web.auth import login_required
from raftsched.web.gateway import gateway
from raftsched.web.gateway_history import cluster_history

bp = Blueprint("cluster", __name__)


def _status() -> dict[str, Any]:
    status = gateway().cluster_status()
    counts = [n["quarantined"] for n in status["nodes"] if n.get("quarantined") is not None]
    return {**status, "quarantined": max(counts) if counts else None}


MEMBERSHIP = ("member_added", "member_removed")


def _history() -> dict[str, Any]:
    """Every node's events and samples (kept in its memory), drawn: a timeline of leader
    changes and elections, per node apply lag and commit latency, membership changes."""
    found = cluster_history(gateway())
    for node in found["nodes"]:
        node["lag_chart"] = charts.sparkline(node["samples"], "apply_lag")
        node["latency_chart"] = charts.sparkline(
            node["samples"], "commit_latency_seconds", unit="s"
        )
    found["timeline"] = charts.timeline(found["nodes"])
    found["membership"] = [e for e in found["events"] if e["kind"] in MEMBERSHIP]
    return found


@bp.get("/cluster")
@login_required
def page() -> Any:
    return render_template("cluster.html", status=_status(), history=_history())


@bp.get("/cluster/history.json")
@login_required
def history_json() -> Any:
    found = cluster_history(gateway())
    return jsonify(
        nodes=[
            {"node_id": n["node_id"], "events": n["events"], "samples": n["samples"]}
            for n in found["nodes"]
        ]
    )


@bp.get("/cluster.json")
@login_required
def status_json() -> Any:
    return jsonify(_status())
