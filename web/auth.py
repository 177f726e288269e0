"""Login, logout, and who may do what.

Users live in the cluster's UserService (passwords hashed there). Logging in asks
VerifyUser; the session (a signed cookie) then holds the username and role. Roles are
ordered: viewer reads, operator also triggers, pauses, clears and marks, admin also manages
users. Every ``RAFTSCHED_USER_RECHECK_SECONDS`` each process re-reads the user list, so a
deleted user is logged out and a changed role applies without waiting for the cookie to end.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    abort,
    current_app,
    flash,
    g,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from raftsched.web.forms import LoginForm
from raftsched.web.gateway import SESSION_KEY, GatewayError, gateway

bp = Blueprint("auth", __name__)

ROLES = ("viewer", "operator", "admin")
F = TypeVar("F", bound=Callable[..., Any])
BAD_LOGIN = "Invalid username or password."


def has_role(user: dict[str, str] | None, role: str) -> bool:
    if user is None or user.get("role") not in ROLES:
        return False
    return ROLES.index(user["role"]) >= ROLES.index(role)


def login_required(view: F) -> F:
    @functools.wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if g.user is None:
            from raftsched.web.handlers import wants_json

            if wants_json():
                abort(401)
            return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))
        return view(*args, **kwargs)

    return wrapped  # type: ignore[return-value]


def role_required(role: str) -> Callable[[F], F]:
    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if not has_role(g.user, role):
                abort(403, f"This needs the {role} role; you are {g.user['role']}.")
            return view(*args, **kwargs)

        return login_required(wrapped)  # type: ignore[return-value]

    return decorate


class _UserCache:
    """username -> role as the cluster last said, re-read at most every ``ttl`` seconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roles: dict[str, str] | None = None
        self._read_at = float("-inf")

    def role_of(self, username: str, ttl: float) -> str | bool | None:
        """The current role, None if the user is gone, True if unknown (cluster down)."""
        with self._lock:
            stale = time.monotonic() - self._read_at > ttl
            if stale:
                self._read_at = time.monotonic()  # one reader at a time; failures wait too
        if stale:
            try:
                users = gateway().list_users()
            except GatewayError:
                users = None
            with self._lock:
                self._roles = None if users is None else {u["username"]: u["role"] for u in users}
        with self._lock:
            if self._roles is None:
                return True
            return self._roles.get(username)

    def forget(self) -> None:
        with self._lock:
            self._read_at = float("-inf")


def _cache() -> _UserCache:
    return current_app.extensions.setdefault("raftsched_users", _UserCache())


@bp.before_app_request
def load_user() -> None:
    g.user = None
    username, role = session.get("user"), session.get("role")
    if not username or request.endpoint in (None, "static", "health.health", "metrics.scrape"):
        return
    current = _cache().role_of(username, current_app.config["RAFTSCHED_USER_RECHECK_SECONDS"])
    if current is None:
        session.clear()
        return
    if isinstance(current, str) and current != role:
        session["role"] = role = current
    g.user = {"username": username, "role": role}


@bp.app_context_processor
def inject_user() -> dict[str, Any]:
    return {"current_user": g.get("user"), "can": lambda role: has_role(g.get("user"), role)}


def safe_next(target: str | None) -> str:
    """A local path to go to after login; anything else (another site) -> the DAG list."""
    parts = urlsplit(target or "")
    local = target and target.startswith("/") and not target.startswith("//")
    if local and not parts.scheme and not parts.netloc and "\\" not in target:
        return target
    return url_for("dags.list_page")


@bp.route("/login", methods=["GET", "POST"])
def login() -> Any:
    form = LoginForm()
    if request.method == "GET":
        form.next.data = request.args.get("next", "")
    if form.validate_on_submit():
        role = gateway().verify_user(form.username.data or "", form.password.data or "")
        if role is None or role not in ROLES:
            form.form_errors.append(BAD_LOGIN)
            return render_template("login.html", form=form), 401
        seen = session.get(SESSION_KEY)  # what this browser has seen stays seen
        session.clear()
        session.permanent = True
        session["user"], session["role"] = form.username.data, role
        if seen is not None:
            session[SESSION_KEY] = seen
        _cache().forget()
        return redirect(safe_next(form.next.data))
    status = 400 if request.method == "POST" else 200
    return render_template("login.html", form=form), status


@bp.post("/logout")
def logout() -> Any:
    session.clear()
    flash("You are logged out.", "info")
    return redirect(url_for("auth.login"))
