"""The ``/api/v1/assets`` routes (§21): list, one asset (its URI percent-encoded in the
path), and an event from outside (operator; idempotent per ``event_id``)."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate
from raftsched.web.api.blueprint import bp, errors
from raftsched.web.api.upstream import api_gateway
from raftsched.web.gateway_assets import emit_event, get_asset, list_assets

from raftsched.core import asset_commands as acm
from raftsched.core import asset_condition as ac


class _Strict(Schema):
    class Meta:
        unknown = "raise"


class AssetEventBody(_Strict):
    uri = fields.String(required=True, validate=validate.Length(min=1, max=ac.MAX_URI_CHARS))
    extra = fields.Dict(
        keys=fields.String(),
        load_default=dict,
        metadata={"description": f"a JSON object (at most {ac.MAX_EXTRA_BYTES} bytes)"},
    )
    event_id = fields.String(
        load_default="",
        validate=validate.Length(max=acm.MAX_KEY_CHARS),
        metadata={"description": "the client's id: a retry with it makes nothing new"},
    )


class AssetRun(Schema):
    dag_id = fields.String()
    run_id = fields.String()


class AssetEventResult(Schema):
    id = fields.Integer()
    duplicate = fields.Boolean(metadata={"description": "the event_id was seen before"})
    runs = fields.List(fields.Nested(AssetRun))


class AssetEvent(Schema):
    id = fields.Integer()
    uri = fields.String()
    extra = fields.Dict()
    timestamp = fields.String(allow_none=True)
    source_dag_id = fields.String()
    source_run_id = fields.String()
    source_task_id = fields.String()
    source_try = fields.Integer()
    event_id = fields.String()
    actor = fields.String()


class AssetSummary(Schema):
    uri = fields.String()
    producers = fields.List(fields.String(), metadata={"description": "dag_id.task_id"})
    consumers = fields.List(fields.String(), metadata={"description": "DAG ids"})
    event_count = fields.Integer()
    last_event = fields.Nested(AssetEvent, allow_none=True)
    queued_for = fields.List(fields.String())
    watchers = fields.List(fields.String(), metadata={"description": "dag_id.name (kind)"})


class AssetList(Schema):
    assets = fields.List(fields.Nested(AssetSummary))


class AssetDetail(AssetSummary):
    events = fields.List(fields.Nested(AssetEvent), metadata={"description": "newest first"})


@bp.route("/assets", methods=["GET"], tags=["Assets"])
@bp.response(200, AssetList)
@errors(403)
def list_all() -> Any:
    """List assets, with their producers, consumers and event counts"""
    return {"assets": list_assets(api_gateway())}


@bp.route("/assets/<path:uri>", methods=["GET"], tags=["Assets"])
@bp.response(200, AssetDetail)
@errors(400, 403, 404)
def get_one(uri: str) -> Any:
    """Get an asset and its newest events (the URI percent-encoded)"""
    return get_asset(api_gateway(), uri)


@bp.route("/assets/events", methods=["POST"], tags=["Assets"])
@bp.arguments(AssetEventBody)
@bp.response(201, AssetEventResult)
@errors(400, 403, 409)
def post_event(body: dict[str, Any]) -> Any:
    """Send an asset event: each DAG whose schedule it satisfies gets one run. Needs
    operator. A retry with the same `event_id` makes no second event or run."""
    return emit_event(api_gateway(), body["uri"], body["extra"], body["event_id"])
