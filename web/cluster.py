"""The cluster page: every node's role, term, indexes, DB watermark, outbox and last leader
contact, refreshed every few seconds from ``/cluster.json``; and how many outbox entries the
metadata DB refused and holds in quarantine (``quarantined``, from the leader; None when no
node reports it), with the command that shows them."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template
from raftsched.web.auth import login_required
from raftsched.web.gateway import gateway

bp = Blueprint("cluster", __name__)


def _status() -> dict[str, Any]:
    status = gateway().cluster_status()
    counts = [n["quarantined"] for n in status["nodes"] if n.get("quarantined") is not None]
    return {**status, "quarantined": max(counts) if counts else None}


@bp.get("/cluster")
@login_required
def page() -> Any:
    return render_template("cluster.html", status=_status())


@bp.get("/cluster.json")
@login_required
def status_json() -> Any:
    return jsonify(_status())
