"""The web's forms (Flask-WTF: each carries its CSRF token).

The trigger form checks its conf, run id and logical date against the cluster's own bounds
(``raftsched.core.limits``) so a refusal is a form error on the page (HTTP 400), never a 500:
a conf nested too deep is refused before ``json.loads`` can recurse.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from flask_wtf import FlaskForm
from wtforms import (
    BooleanField,
    HiddenField,
    PasswordField,
    SelectField,
    StringField,
    TextAreaField,
)
from wtforms.validators import DataRequired, Length, Optional, Regexp, ValidationError

from raftsched.core import limits
from raftsched.errors import LimitExceeded

USERNAME = r"^[A-Za-z0-9_.@-]{1,64}$"


class LoginForm(FlaskForm):
    username = StringField("Username", validators=[DataRequired(), Length(max=64)])
    password = PasswordField("Password", validators=[DataRequired(), Length(max=1024)])
    next = HiddenField()


def parse_conf(text: str) -> dict[str, Any]:
    """The run conf as a dict; ValueError naming the problem when it is not a JSON object."""
    text = (text or "").strip() or "{}"
    try:  # size and depth first: json.loads must not recurse on a deeply nested conf
        limits.parse_conf(text, "conf")
    except LimitExceeded as err:  # the two common mistakes keep their own wording below
        if not err.problem.startswith(("is not valid JSON", "must be a JSON object")):
            raise ValueError(str(err)) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
        ) from None
    except ValueError:  # an integer past Python's own digit limit
        raise ValueError(
            "the conf has an integer of thousands of digits: integers are limited to 64 bits"
            " (19 digits); send a larger number as a string"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object ({{...}}), got a {type(value).__name__}")
    return value


def parse_logical_date(text: str) -> datetime | None:
    """ISO 8601; without a zone it is UTC. Empty: None (the cluster uses now)."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("expected an ISO 8601 date and time, e.g. 2024-01-31T06:00:00Z") from None
    value = value if value.tzinfo else value.replace(tzinfo=UTC)
    limits.check_datetime("logical date", value)  # LimitExceeded is a ValueError
    return value


class TriggerForm(FlaskForm):
    conf = TextAreaField("Conf (a JSON object)", default="{}")
    run_id = StringField(
        "Run id (optional)",
        validators=[Optional(), Length(max=250), Regexp(r"^[A-Za-z0-9_.:+@-]+$")],
    )
    logical_date = StringField("Logical date (optional, ISO 8601, UTC)", validators=[Optional()])

    def validate_conf(self, field: Any) -> None:
        try:
            parse_conf(field.data)
        except ValueError as err:
            raise ValidationError(str(err)) from None

    def validate_logical_date(self, field: Any) -> None:
        try:
            parse_logical_date(field.data)
        except ValueError as err:
            raise ValidationError(str(err)) from None


class UserForm(FlaskForm):
    username = StringField(
        "Username",
        validators=[DataRequired(), Regexp(USERNAME, message="1-64 of A-Z a-z 0-9 _ . @ -")],
    )
    password = PasswordField(
        "Password",
        validators=[DataRequired(), Length(min=8, max=1024, message="use at least 8 characters")],
    )
    role = SelectField("Role", choices=["viewer", "operator", "admin"])
    replace = BooleanField("Replace an existing user's password and role")
