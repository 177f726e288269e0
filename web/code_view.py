"""The DAG code view: the DAG's file as the cluster parsed it, with its spec hash.

The webserver shares no filesystem with the nodes: the text comes over gRPC
(``GetDagSource``) from a node, which reads the DAG record's own path, at most 512 KiB
(``raftsched/api/servicers/dag_source.py``). When the file changed after the parse the page
says so (the next parse picks it up)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, render_template
from raftsched.web.auth import login_required
from raftsched.web.gateway import gateway
from raftsched.web.gateway_source import dag_source

bp = Blueprint("code_view", __name__)


@bp.get("/dags/<dag_id>/code")
@login_required
def page(dag_id: str) -> Any:
    source = dag_source(gateway(), dag_id)
    modified, parsed = source["file_modified"], source["parsed_at"]
    source["changed_since_parse"] = bool(modified and parsed and modified > parsed)
    source["lines"] = source["source"].splitlines()
    return render_template("dags/code.html", dag_id=dag_id, src=source)
