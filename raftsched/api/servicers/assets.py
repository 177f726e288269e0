"""AssetService: asset events from outside, and the assets' producers, consumers and events
(docs/architecture.md §21). The node checks an event's bounds, then proposes
``EmitAssetEvents``: the committed apply makes the event and the runs it satisfies."""

from __future__ import annotations

from typing import Any

import grpc

from raftsched.api.gen import asset_pb2, asset_pb2_grpc
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.context import ApiContext
from raftsched.api.status import invalid_argument, translate_errors
from raftsched.core import asset_commands as acm
from raftsched.core import asset_condition as ac
from raftsched.core import asset_views, limits
from raftsched.core.asset_table import MAX_ASSETS, AssetEvent
from raftsched.errors import LimitExceeded, StatusError

Code = grpc.StatusCode
DEFAULT_EVENTS = 25


class AssetServicer(asset_pb2_grpc.AssetServiceServicer):
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    @translate_errors
    def EmitAssetEvent(self, request: Any, context: grpc.ServicerContext) -> Any:
        uri, extra = check_event(request.uri, request.extra_json or "{}", request.event_id)
        command = self.ctx.make(
            acm.EmitAssetEvents,
            bounds.request_id(request.request_id),
            events=(acm.AssetEventIn(uri, extra, request.event_id),),
            actor=self.ctx.actor()[: acm.MAX_ACTOR_CHARS],
        )
        result = self.ctx.propose(command, context)
        if not result.ok and result.reason == acm.NOT_YET:
            raise StatusError(
                Code.FAILED_PRECONDITION,
                "asset events need cluster version 3: finish the upgrade of every node first",
            )
        (item,) = result.value
        if not item.ok:
            raise StatusError(
                Code.RESOURCE_EXHAUSTED,
                f"the cluster holds events of {MAX_ASSETS:,} assets: events of a new asset are"
                f" refused ({item.reason})",
            )
        return asset_pb2.EmitAssetEventResponse(
            id=int(item.value["event_id"]),
            runs=[asset_pb2.AssetRun(dag_id=d, run_id=r) for d, r in item.value["runs"]],
            duplicate=item.reason == acm.DUPLICATE_EVENT,
            freshness=self.ctx.freshness(),
        )

    @translate_errors
    def ListAssets(self, request: Any, context: grpc.ServicerContext) -> Any:
        found, fresh = self.ctx.read(asset_views.summaries)
        return asset_pb2.ListAssetsResponse(assets=[summary_pb(s) for s in found], freshness=fresh)

    @translate_errors
    def GetAsset(self, request: Any, context: grpc.ServicerContext) -> Any:
        uri = _uri(request.uri)
        limit = int(request.limit) or DEFAULT_EVENTS

        def read(state: Any) -> tuple[list[dict[str, Any]], tuple[AssetEvent, ...]]:
            return asset_views.summaries(state, only=uri), state.assets.events(uri)

        (found, events), fresh = self.ctx.read(read)
        if not found:
            raise StatusError(Code.NOT_FOUND, f"no DAG names asset {uri!r} and it has no events")
        return asset_pb2.AssetDetail(
            summary=summary_pb(found[0]),
            events=[event_pb(e) for e in reversed(events[-limit:])],
            freshness=fresh,
        )


def check_event(uri: object, extra: object, event_id: object) -> tuple[str, str]:
    """An event's fields, checked before anything is proposed (INVALID_ARGUMENT naming one)."""
    checked = _uri(uri)
    try:
        ac.check_extra("extra_json", extra)
        limits.check_text("event_id", event_id, acm.MAX_KEY_CHARS)
    except LimitExceeded as err:
        raise StatusError(Code.INVALID_ARGUMENT, str(err)) from None
    if any(ch < " " for ch in str(event_id)):
        raise invalid_argument("event_id", event_id, "no control characters")
    return checked, str(extra)


def _uri(uri: object) -> str:
    try:
        return ac.check_uri("uri", uri)
    except LimitExceeded as err:
        raise StatusError(Code.INVALID_ARGUMENT, str(err)) from None


def event_pb(event: AssetEvent) -> Any:
    return asset_pb2.AssetEvent(
        id=event.id,
        uri=event.uri,
        extra_json=event.extra_json,
        timestamp=convert.ts(event.timestamp),
        source_dag_id=event.source_dag_id,
        source_run_id=event.source_run_id,
        source_task_id=event.source_task_id,
        source_try=event.source_try,
        event_id=event.key,
        actor=event.actor,
    )


def summary_pb(summary: dict[str, Any]) -> Any:
    last = summary["last_event"]
    return asset_pb2.AssetSummary(
        uri=summary["uri"],
        producers=summary["producers"],
        consumers=summary["consumers"],
        event_count=summary["event_count"],
        last_event=event_pb(last) if last is not None else None,
        queued_for=summary["queued_for"],
        watchers=summary.get("watchers", []),
    )
