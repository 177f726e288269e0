"""The assets pages (§21): every asset with the tasks that produce it, the DAGs it schedules
and its newest event; one asset with its newest events (where each came from, its extra).
Read through the gateway (AssetService.ListAssets, GetAsset)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, render_template
from raftsched.web.auth import role_required
from raftsched.web.gateway import gateway
from raftsched.web.gateway_assets import get_asset, list_assets

bp = Blueprint("assets", __name__)


@bp.get("/assets")
@role_required("viewer")
def page() -> Any:
    return render_template("assets.html", assets=list_assets(gateway()), asset=None)


@bp.get("/assets/<path:uri>")
@role_required("viewer")
def detail(uri: str) -> Any:
    return render_template("assets.html", assets=None, asset=get_asset(gateway(), uri, 100))
