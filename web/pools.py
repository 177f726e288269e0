"""The pools page: every pool with its slots, the slots its running attempts hold and the tasks
waiting in it (``PoolService.ListPools``); an operator sets (creates, resizes) or deletes one.
``/pools.json`` is the list. The REST API's ``/api/v1/pools`` routes call the same functions
through the caller's gateway (``web/api/pool_routes.py``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, jsonify, redirect, render_template, request, url_for
from flask_wtf import FlaskForm
from raftsched.web.auth import login_required, role_required
from raftsched.web.gateway import Gateway, NotFound, Refused, gateway
from raftsched.web.view_models import ts
from wtforms import IntegerField, StringField
from wtforms.validators import DataRequired, Length, NumberRange, Optional, Regexp

from raftsched.api.gen import pool_pb2
from raftsched.core.pool_table import MAX_POOL_DESCRIPTION_CHARS, MAX_POOL_SLOTS

bp = Blueprint("pools", __name__)
UNLIMITED = -1  # ListPools' slots of default_pool while it is not set


def list_pools(via: Gateway) -> list[dict[str, Any]]:
    """Every pool, default_pool first (``slots`` None: unlimited)."""
    response = via._call("pools", "ListPools", pool_pb2.ListPoolsRequest())
    return [
        {
            "name": p.name,
            "slots": None if p.slots == UNLIMITED else int(p.slots),
            "running_slots": int(p.running_slots),
            "queued_tasks": int(p.queued_tasks),
            "description": p.description,
            "updated_at": ts(p, "updated_at"),
        }
        for p in response.pools
    ]


def set_pool(via: Gateway, name: str, slots: int, description: str = "") -> bool:
    """SetPool: whether it changed anything."""
    request_message = pool_pb2.SetPoolRequest(name=name, slots=slots, description=description)
    return bool(via._call("pools", "SetPool", request_message).changed)


def delete_pool(via: Gateway, name: str) -> None:
    via._call("pools", "DeletePool", pool_pb2.DeletePoolRequest(name=name))


class PoolForm(FlaskForm):
    name = StringField(
        "Name",
        validators=[
            DataRequired(),
            Regexp(r"^[A-Za-z0-9_.\-]{1,250}$", message="letters, digits, '_', '.' and '-'"),
        ],
    )
    slots = IntegerField("Slots", validators=[NumberRange(min=0, max=MAX_POOL_SLOTS)])
    description = StringField(
        "Description", validators=[Optional(), Length(max=MAX_POOL_DESCRIPTION_CHARS)]
    )


@bp.route("/pools", methods=["GET"])
@login_required
def page() -> Any:
    return render_template("pools.html", pools=list_pools(gateway()), form=PoolForm())


@bp.post("/pools")
@role_required("operator")
def save() -> Any:
    form = PoolForm()
    if form.validate_on_submit():
        try:
            changed = set_pool(
                gateway(),
                form.name.data or "",
                int(form.slots.data or 0),
                form.description.data or "",
            )
        except Refused as err:
            form.form_errors.append(err.message)
        else:
            flash(f"Pool {form.name.data} {'saved' if changed else 'unchanged'}.", "success")
            return redirect(url_for("pools.page"))
    status = 400 if request.method == "POST" else 200
    return render_template("pools.html", pools=list_pools(gateway()), form=form), status


@bp.post("/pools/<name>/delete")
@role_required("operator")
def delete(name: str) -> Any:
    try:
        delete_pool(gateway(), name)
    except NotFound:
        flash(f"No pool {name}.", "info")
    except Refused as err:
        flash(err.message, "error")
    else:
        flash(f"Pool {name} deleted.", "success")
    return redirect(url_for("pools.page"))


@bp.get("/pools.json")
@login_required
def pools_json() -> Any:
    return jsonify({"pools": list_pools(gateway())})
