"""GetDagSource through the caller's :class:`~raftsched.web.gateway.Gateway`: the code view's
call (``code_view.py``). A module of its own: ``gateway.py`` is at the line limit."""

from __future__ import annotations

from typing import Any

from raftsched.web.gateway import Gateway
from raftsched.web.view_models import ts

from raftsched.api.gen import dag_pb2


def dag_source(gw: Gateway, dag_id: str) -> dict[str, Any]:
    """The DAG's file as a node has it: ``source`` (bounded: ``truncated``), ``fileloc``,
    ``spec_hash``, ``size_bytes``, ``max_bytes``, ``file_modified``, ``parsed_at``, ``error``
    and ``node_id`` (who read it)."""
    response = gw._call("dags", "GetDagSource", dag_pb2.GetDagSourceRequest(dag_id=dag_id))
    return {
        "fileloc": response.fileloc,
        "source": response.source,
        "truncated": response.truncated,
        "size_bytes": response.size_bytes,
        "max_bytes": response.max_bytes,
        "spec_hash": response.spec_hash,
        "file_modified": ts(response, "file_modified"),
        "parsed_at": ts(response, "parsed_at"),
        "error": response.error,
        "node_id": response.freshness.node_id,
    }
