"""The cluster page: every node's role, term, indexes, DB watermark, outbox and last leader
contact, refreshed every few seconds from ``/cluster.json``."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template
from raftsched.web.auth import login_required
from raftsched.web.gateway import gateway

bp = Blueprint("cluster", __name__)


@bp.get("/cluster")
@login_required
def page() -> Any:
    return render_template("cluster.html", status=gateway().cluster_status())


@bp.get("/cluster.json")
@login_required
def status_json() -> Any:
    return jsonify(gateway().cluster_status())
