"""The workers page: every live worker (host, pid, version, queues, slots used/total, the
attempts it runs, linked to their task pages, its last call) and those lost in the last 10
minutes with why; ``/workers.json`` is the same data. Read through the gateway's client
(``WorkerService.ListWorkers``, ``raftsched.api.workers_view``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, render_template
from raftsched.web.auth import login_required
from raftsched.web.gateway import Gateway, gateway

from raftsched.api.gen import worker_pb2
from raftsched.api.workers_view import workers_dict

bp = Blueprint("workers", __name__)


def list_workers(via: Gateway) -> dict[str, Any]:
    """The roster through ``via`` (the pages' gateway, or the REST caller's): its ``_call``
    keeps the gateway's consistency, caching and error mapping."""
    return workers_dict(via._call("workers", "ListWorkers", worker_pb2.ListWorkersRequest()))


@bp.get("/workers")
@login_required
def page() -> Any:
    return render_template("workers.html", roster=list_workers(gateway()))


@bp.get("/workers.json")
@login_required
def roster_json() -> Any:
    return jsonify(list_workers(gateway()))
