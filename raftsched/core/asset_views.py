"""Read views of assets (§21): which tasks produce an asset, which DAGs consume it, its
events. Pure reads of a state, for the API (AssetService) and the web pages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftsched.core import asset_condition as ac
from raftsched.core import asset_watchers

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState


def summaries(state: SchedulerState, only: str | None = None) -> list[dict[str, Any]]:
    """Every asset a registered DAG names or an event made (``only``: that URI alone), by
    URI: {uri, producers ("dag.task"), consumers (DAG ids), event_count, last_event (an
    AssetEvent or None), queued_for (DAG ids), watchers ("dag.name (kind)")}."""
    found: dict[str, dict[str, Any]] = {}

    def entry(uri: str) -> dict[str, Any] | None:
        if only is not None and uri != only:
            return None
        return found.setdefault(
            uri, {"uri": uri, "producers": [], "consumers": [], "queued_for": [], "watchers": []}
        )

    for dag_id, record in state.catalog.records.items():
        if not record.active:
            continue
        spec = record.spec
        for task in spec.tasks:
            for uri in task.outlets:
                if (e := entry(uri)) is not None:
                    e["producers"].append(f"{dag_id}.{task.task_id}")
        if spec.asset_condition:
            for uri in sorted(ac.uris_of(ac.parse(spec.asset_condition))):
                if (e := entry(uri)) is not None:
                    e["consumers"].append(dag_id)
            for uri in state.assets.queued(dag_id):
                if (e := entry(uri)) is not None:
                    e["queued_for"].append(dag_id)
        for uri, name, kind, _ in asset_watchers.parse(spec.asset_watchers):
            if (e := entry(uri)) is not None:
                e["watchers"].append(f"{dag_id}.{name} ({kind})")
    for uri in state.assets.uris():
        entry(uri)
    out = []
    for uri in sorted(found):
        e = found[uri]
        events = state.assets.events(uri)
        e["event_count"] = state.assets.count(uri)
        e["last_event"] = events[-1] if events else None
        out.append(e)
    return out


def dag_edges(state: SchedulerState, dag_id: str) -> dict[str, list[str]]:
    """A DAG's cross-DAG asset edges: {"upstream": producers ("dag.task") of the assets it is
    scheduled on, "downstream": DAGs scheduled on its tasks' outlets}."""
    record = state.catalog.get(dag_id)
    if record is None:
        return {"upstream": [], "downstream": []}
    mine = {uri for task in record.spec.tasks for uri in task.outlets}
    wanted = (
        ac.uris_of(ac.parse(record.spec.asset_condition))
        if record.spec.asset_condition
        else frozenset()
    )
    upstream, downstream = set(), set()
    for other_id, other in state.catalog.records.items():
        if not other.active:
            continue
        for task in other.spec.tasks:
            if wanted.intersection(task.outlets):
                upstream.add(f"{other_id}.{task.task_id}")
        text = other.spec.asset_condition
        if mine and text and mine & ac.uris_of(ac.parse(text)):
            downstream.add(other_id)
    return {"upstream": sorted(upstream), "downstream": sorted(downstream)}
