"""Variables and connections (admin only): each one's name, description and when it was set,
never its value; set or add one, delete one.

A value goes from the form straight to the cluster's SecretService, which encrypts it before
it enters the Raft log; no page shows it again. The value field is a password field (WTForms
never fills it back in, even when the form comes back with an error), flash messages name the
variable only, and the cluster's refusals never quote a value (``api/servicers/secrets.py``).
Every POST carries the CSRF token (Flask-WTF), as everywhere in the web.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, abort, flash, redirect, render_template, request, url_for
from flask_wtf import FlaskForm
from raftsched.web.auth import role_required
from raftsched.web.gateway import NotFound, Refused, gateway
from raftsched.web.view_models import ts
from wtforms import PasswordField, StringField
from wtforms.validators import DataRequired, Length, Optional, ValidationError

from raftsched import secrets as sx
from raftsched.api.gen import secret_pb2
from raftsched.core import limits

bp = Blueprint("secrets", __name__)

# URL segment -> (kind, title, one, what its value is called)
PAGES = {
    "variables": (sx.VARIABLE, "Variables", "Variable", "Value"),
    "connections": (sx.CONNECTION, "Connections", "Connection", "URI"),
}


def _name(form: Any, field: Any) -> None:
    try:
        sx.check_key(field.data or "")
    except ValueError as err:
        raise ValidationError(str(err)) from None


class SecretForm(FlaskForm):
    key = StringField("Name", validators=[DataRequired(), _name])
    # A password field: what was typed is never rendered back into the page.
    value = PasswordField(
        "Value", validators=[DataRequired(), Length(max=limits.MAX_SECRET_VALUE_CHARS)]
    )
    description = StringField(
        "Description", validators=[Optional(), Length(max=limits.MAX_SECRET_DESCRIPTION_CHARS)]
    )
    # Only these DAGs may read it (core/secret_policy.py); empty: every DAG, as in Airflow
    dags = StringField("Only these DAGs (comma-separated)", validators=[Optional()])


def _page(section: str) -> tuple[str, str, str, str]:
    if section not in PAGES:
        abort(404)
    return PAGES[section]


def _call(method: str, request_message: Any) -> Any:
    # the gateway's one gRPC path: failover, the session's seen index, error translation
    return gateway()._call("secrets", method, request_message)


def list_secrets(kind: str) -> list[dict[str, Any]]:
    """Names, descriptions and when each was set: the answer holds no value."""
    response = _call("ListSecrets", secret_pb2.ListSecretsRequest(kind=kind))
    return [
        {
            "key": s.key,
            "description": s.description,
            "updated_at": ts(s, "updated_at"),
            "dags": ", ".join(s.dags),
        }
        for s in response.secrets
    ]


@bp.route("/<any(variables, connections):section>", methods=["GET", "POST"])
@role_required("admin")
def page(section: str) -> Any:
    kind, title, one, value_label = _page(section)
    form = SecretForm()
    form.value.label.text = value_label
    if form.validate_on_submit():
        message = secret_pb2.SetSecretRequest(
            kind=kind,
            key=form.key.data or "",
            value=form.value.data or "",
            description=form.description.data or "",
            dags=[d.strip() for d in (form.dags.data or "").split(",") if d.strip()],
        )
        try:
            changed = _call("SetSecret", message).changed
        except Refused as err:
            form.form_errors.append(err.message)
        else:
            flash(f"{one} {form.key.data} {'saved' if changed else 'unchanged'}.", "success")
            return redirect(url_for("secrets.page", section=section))
    status = 400 if request.method == "POST" else 200
    return (
        render_template(
            "secrets.html",
            section=section,
            title=title,
            one=one,
            items=list_secrets(kind),
            mask=sx.MASK,
            form=form,
        ),
        status,
    )


@bp.post("/<any(variables, connections):section>/<key>/delete")
@role_required("admin")
def delete(section: str, key: str) -> Any:
    kind, _, one, _ = _page(section)
    try:
        _call("DeleteSecret", secret_pb2.DeleteSecretRequest(kind=kind, key=key))
    except NotFound:
        flash(f"No {kind} {key}.", "info")
    except Refused as err:
        flash(err.message, "error")
    else:
        flash(f"{one} {key} deleted.", "success")
    return redirect(url_for("secrets.page", section=section))
