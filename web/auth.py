"""Login, logout, and who may do what.

Users live in the cluster's UserService (passwords hashed there). Logging in fetches the
user's hash (GetPasswordHash, the webserver's admin token) and checks the password here, so a
login costs no scheduler node any CPU (scrypt takes longer than a Raft election timeout); an
unknown user is checked against a dummy hash, so a name's existence does not show in the
time taken. ``login_limits.py`` bounds the checks (HTTP 429 with Retry-After). The session (a
signed cookie) then holds the username and role. Roles are
ordered: viewer reads, operator also triggers, pauses, clears and marks, admin also manages
users. Every ``RAFTSCHED_USER_RECHECK_SECONDS`` each process re-reads the user list, so a
deleted user is logged out and a changed role applies without waiting for the cookie to end.
"""

from __future__ import annotations

import functools
import re
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
from raftsched.web.gateway import SESSION_KEY, GatewayError, Refused, gateway
from raftsched.web.login_limits import LoginGuard, client_key
from werkzeug.security import check_password_hash, generate_password_hash

from raftsched.errors import LoginThrottled

bp = Blueprint("auth", __name__)

ROLES = ("viewer", "operator", "admin")
F = TypeVar("F", bound=Callable[..., Any])
BAD_LOGIN = "Invalid username or password."
USERNAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")  # what the cluster accepts (user.proto)
OLD_CLUSTER = (
    "The scheduler nodes are older than this webserver (they lack GetPasswordHash): upgrade"
    " them first, then log in."
)


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


@functools.cache
def _dummy_hash() -> str:
    """Checked for a user that does not exist, with the parameters of a real hash (made by
    the same function as the cluster's): an unknown name costs as much as a wrong password."""
    return generate_password_hash("raftsched-no-such-user")


def check_login(guard: LoginGuard, client: str, username: str, password: str) -> str | None:
    """The user's role if ``password`` is right, else None; LoginThrottled past ``guard``'s
    limits. The scrypt check runs in this process; the cluster only reads the stored hash
    (never VerifyUser: no login makes a node compute scrypt)."""
    guard.admit(client, username)
    try:
        found = gateway().password_hash(username) if USERNAME.fullmatch(username) else None
    except Refused as err:
        if err.code != "UNIMPLEMENTED":
            raise
        raise Refused(OLD_CLUSTER, err.code) from None
    stored, role = found if found is not None else (_dummy_hash(), "")
    with guard.checking():
        ok = check_password_hash(stored, password) and role in ROLES
    if not ok:
        guard.failed(username)
    return role if ok else None


def _guard() -> LoginGuard:
    """This process's login limits, from the app's settings."""
    app = current_app
    guard = app.extensions.get("raftsched_login")
    if guard is None:
        guard = app.extensions.setdefault(
            "raftsched_login",
            LoginGuard(
                client_burst=app.config["LOGIN_CLIENT_BURST"],
                client_per_minute=app.config["LOGIN_CLIENT_PER_MINUTE"],
                user_burst=app.config["LOGIN_USER_BURST"],
                user_per_minute=app.config["LOGIN_USER_PER_MINUTE"],
                concurrency=app.config["LOGIN_CONCURRENCY"],
            ),
        )
    return guard


@bp.route("/login", methods=["GET", "POST"])
def login() -> Any:
    form = LoginForm()
    if request.method == "GET":
        form.next.data = request.args.get("next", "")
    if form.validate_on_submit():
        username, password = form.username.data or "", form.password.data or ""
        try:
            client = client_key(request.remote_addr)
            role = check_login(_guard(), client, username, password)
        except LoginThrottled as err:
            form.form_errors.append(str(err))
            page = render_template("login.html", form=form)
            return page, 429, {"Retry-After": str(int(err.retry_after))}
        if role is None:
            form.form_errors.append(BAD_LOGIN)
            return render_template("login.html", form=form), 401
        seen = session.get(SESSION_KEY)  # what this browser has seen stays seen
        session.clear()
        session.permanent = True
        session["user"], session["role"] = username, role
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
