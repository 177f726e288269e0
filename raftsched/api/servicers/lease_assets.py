"""Assets on the worker's calls (docs/architecture.md §21): an asset-triggered run's events on
its attempts' leases (read from the replica that committed the lease, as its upstream results
are, so a worker never reads the DB for them), and an outcome's outlet extras, checked before
they are proposed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raftsched.api.status import invalid_argument
from raftsched.core import asset_condition, mapping
from raftsched.core.model import TaskKey
from raftsched.errors import LimitExceeded

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


def outlet_extras(ctx: Any, request: Any, key: TaskKey) -> dict[str, Any]:
    """A successful attempt's outlet extras (a CompleteRequest's), bounded (INVALID_ARGUMENT
    past a bound), of the task's declared outlets only (the others are left out, as Airflow
    ignores them): the spec is read only when there are extras. {} when there is none."""
    if not request.success or not request.outlet_extras:
        return {}
    pairs = tuple(sorted((str(k), str(v)) for k, v in request.outlet_extras.items()))
    try:
        asset_condition.check_outlet_extras("outlet_extras", pairs)
    except LimitExceeded as err:
        raise invalid_argument("outlet_extras", "(asset extras)", str(err)) from None
    outlets, _ = ctx.read(lambda state: _outlets_of(state, key))
    kept = tuple(pair for pair in pairs if pair[0] in outlets)
    return {"outlet_extras": kept} if kept else {}


def _outlets_of(state: Any, key: TaskKey) -> frozenset[str]:
    """The outlets of ``key``'s task in its run's spec (none when the run is not held)."""
    rec = state.run_table.get(key.dag_id, key.run_id)
    if rec is None:
        return frozenset()
    try:
        return frozenset(rec.spec.task(mapping.task_of(key.task_id)).outlets)
    except KeyError:
        return frozenset()
