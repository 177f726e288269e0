"""Accounts (admin only): list, create or replace, delete. Passwords are hashed by the
cluster's UserService; the webserver never stores them."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, g, redirect, render_template, request, url_for
from raftsched.web.auth import role_required
from raftsched.web.forms import UserForm
from raftsched.web.gateway import Refused, gateway

bp = Blueprint("users", __name__)


@bp.route("/users", methods=["GET", "POST"])
@role_required("admin")
def page() -> Any:
    form = UserForm()
    if form.validate_on_submit():
        try:
            gateway().create_user(
                form.username.data or "",
                form.password.data or "",
                form.role.data or "viewer",
                replace=bool(form.replace.data),
            )
        except Refused as err:
            form.form_errors.append(err.message)
        else:
            verb = "saved" if form.replace.data else "created"
            flash(f"User {form.username.data} ({form.role.data}) {verb}.", "success")
            return redirect(url_for("users.page"))
    status = 400 if request.method == "POST" else 200
    return render_template("users.html", users=gateway().list_users(), form=form), status


@bp.post("/users/<username>/delete")
@role_required("admin")
def delete(username: str) -> Any:
    if username == g.user["username"]:
        flash("You cannot delete yourself; ask another admin.", "error")
    elif gateway().delete_user(username):
        flash(f"User {username} deleted.", "success")
    else:
        flash(f"No user {username}.", "info")
    return redirect(url_for("users.page"))
