"""The gateway's asset calls (AssetService, §21): lists, one asset, an event from outside."""

from __future__ import annotations

import json
from typing import Any

from raftsched.api.asset_wire import event_dict, summary_dict
from raftsched.api.gen import asset_pb2


def list_assets(gw: Any) -> list[dict[str, Any]]:
    response = gw._call("assets", "ListAssets", asset_pb2.ListAssetsRequest())
    return [summary_dict(s) for s in response.assets]


def get_asset(gw: Any, uri: str, limit: int = 25) -> dict[str, Any]:
    response = gw._call("assets", "GetAsset", asset_pb2.GetAssetRequest(uri=uri, limit=limit))
    return {
        **summary_dict(response.summary),
        "events": [event_dict(e) for e in response.events],
    }


def emit_event(gw: Any, uri: str, extra: dict[str, Any], event_id: str = "") -> dict[str, Any]:
    request = asset_pb2.EmitAssetEventRequest(
        uri=uri, extra_json=json.dumps(extra), event_id=event_id
    )
    response = gw._call("assets", "EmitAssetEvent", request)
    return {
        "id": response.id,
        "duplicate": response.duplicate,
        "runs": [{"dag_id": r.dag_id, "run_id": r.run_id} for r in response.runs],
    }


def condition_text(text: str) -> str:
    """A DAG's asset condition as people write it: ``a & (b | c)`` ("" for none)."""
    if not text:
        return ""

    def show(node: Any, top: bool) -> str:
        if isinstance(node, str):
            return node
        ((op, items),) = node.items()
        inner = (" & " if op == "all" else " | ").join(show(i, False) for i in items)
        return inner if top or len(items) == 1 else f"({inner})"

    return show(json.loads(text), True)


def condition_uris(text: str) -> list[str]:
    """Every URI a DAG's asset condition names, in order of appearance."""
    out: dict[str, None] = {}
    stack = [json.loads(text)] if text else []
    while stack:
        node = stack.pop(0)
        if isinstance(node, str):
            out[node] = None
        else:
            stack[:0] = next(iter(node.values()))
    return list(out)
