"""An asset-triggered run's events on its attempts' leases (docs/architecture.md §21): read
from the replica that committed the lease, as its upstream results are, so a worker never
reads the DB for them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raftsched.core.model import TaskKey

ASSET_RUN_PREFIX = "asset_triggered__"  # the run ids core/handlers_assets.py gives


def add_asset_events(node: Any, grants: Sequence[Any], leases: Sequence[Any]) -> None:
    """Set ``asset_events_json`` of each TaskLease whose run an asset event made."""
    if not any(g.lease.key.run_id.startswith(ASSET_RUN_PREFIX) for g in grants):
        return
    events = node.read(lambda st: _asset_events(st, grants))
    for lease, grant in zip(leases, grants, strict=True):
        lease.asset_events_json = events.get(grant.lease.key, "")


def _asset_events(state: Any, grants: Sequence[Any]) -> dict[TaskKey, str]:
    out = {}
    for g in grants:
        run = state.run(g.lease.key.dag_id, g.lease.key.run_id)
        if run is not None and run.asset_events_json:
            out[g.lease.key] = run.asset_events_json
    return out
