"""``/api/v1/pools``: list (viewer), set (PUT, operator) and delete (DELETE, operator) pools
(README "Pools"). The same calls as the pools page (``raftsched.web.pools``), through the
caller's gateway, so the cluster's roles decide."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, validate
from raftsched.web import pools
from raftsched.web.api.blueprint import bp, errors
from raftsched.web.api.schemas import _Strict
from raftsched.web.api.upstream import api_gateway

from raftsched.core.pool_table import MAX_POOL_DESCRIPTION_CHARS, MAX_POOL_SLOTS


class Pool(Schema):
    name = fields.String()
    slots = fields.Integer(allow_none=True, metadata={"description": "null: unlimited"})
    running_slots = fields.Integer(metadata={"description": "held by running attempts now"})
    queued_tasks = fields.Integer(metadata={"description": "tasks waiting in it"})
    description = fields.String()
    updated_at = fields.DateTime(
        allow_none=True,
        metadata={"description": "null: never set (default_pool, or a pool tasks name)"},
    )


class PoolList(Schema):
    pools = fields.List(fields.Nested(Pool), metadata={"description": "default_pool first"})


class PoolBody(_Strict):
    slots = fields.Integer(required=True, validate=validate.Range(min=0, max=MAX_POOL_SLOTS))
    description = fields.String(
        load_default="", validate=validate.Length(max=MAX_POOL_DESCRIPTION_CHARS)
    )


class PoolSet(Schema):
    name = fields.String()
    slots = fields.Integer()
    changed = fields.Boolean(metadata={"description": "false: it was set so already"})


class PoolDeleted(Schema):
    name = fields.String()
    deleted = fields.Boolean()


@bp.route("/pools", methods=["GET"], tags=["Pools"])
@bp.response(200, PoolList)
@errors(403)
def list_pools() -> Any:
    """Every pool: its slots, the slots its running attempts hold, the tasks waiting in it.
    default_pool (unlimited until set) first; a pool tasks name that nobody created has 0."""
    return {"pools": pools.list_pools(api_gateway())}


@bp.route("/pools/<name>", methods=["PUT"], tags=["Pools"])
@bp.arguments(PoolBody)
@bp.response(200, PoolSet)
@errors(400, 403)
def set_pool(body: dict[str, Any], name: str) -> Any:
    """Create a pool or change its slots and description. Needs operator. Shrinking a pool
    stops nothing: it grants no new attempt until enough of its running ones end."""
    changed = pools.set_pool(api_gateway(), name, body["slots"], body["description"])
    return {"name": name, "slots": body["slots"], "changed": changed}


@bp.route("/pools/<name>", methods=["DELETE"], tags=["Pools"])
@bp.response(200, PoolDeleted)
@errors(403, 404)
def delete_pool(name: str) -> Any:
    """Delete a pool: its running attempts go on, its queued tasks wait. Needs operator."""
    pools.delete_pool(api_gateway(), name)
    return {"name": name, "deleted": True}
