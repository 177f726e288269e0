"""UserService: web UI accounts in the metadata DB (not replicated: users are not decisions).

Validation follows user.proto: usernames of 1-64 characters of ``[A-Za-z0-9_.@-]``, passwords
of at least 8 characters, roles admin/operator/viewer. VerifyUser answers ``ok=false`` for an
unknown user and for a wrong password alike, in about the same time (store.users hashes a
dummy password for unknown users).

Logins do not cost a node CPU: a password check is scrypt, about 136 ms of CPU, and a node's
Raft thread must answer within an election timeout (150 ms). The webserver asks
GetPasswordHash (admin only, like every user call) and checks the password itself
(``web/login.py``), behind its rate limits. VerifyUser stays for other clients and older
webservers, one check at a time per node (:data:`CHECK_WAIT`, then RESOURCE_EXHAUSTED);
``raftsched_password_checks_total`` on the node's /metrics counts the checks it made.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter

from raftsched.api.gen import user_pb2, user_pb2_grpc
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.context import ApiContext
from raftsched.api.status import invalid_argument, translate_errors
from raftsched.core import limits
from raftsched.errors import LimitExceeded, PasswordChecksBusy, StatusError, UserError
from raftsched.store import users

USERNAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
ROLES = ("admin", "operator", "viewer")
MIN_PASSWORD = 8
MAX_PASSWORD = 1024
CHECK_WAIT = 1.0  # seconds a VerifyUser waits for the node's one password check slot


class UserServicer(user_pb2_grpc.UserServiceServicer):
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx
        self._checking = threading.BoundedSemaphore(1)
        self.checks = _checks_counter(ctx)

    @translate_errors
    def CreateUser(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not USERNAME.fullmatch(request.username):
            raise invalid_argument(
                "username", request.username, "expected 1-64 characters of A-Z a-z 0-9 _ . @ -"
            )
        if not MIN_PASSWORD <= len(request.password) <= MAX_PASSWORD:
            raise invalid_argument(
                "password",
                f"<{len(request.password)} characters>",
                f"expected {MIN_PASSWORD} to {MAX_PASSWORD} characters",
            )
        if not limits.is_clean(request.password):
            raise LimitExceeded("password", "contains a NUL character or invalid UTF-8")
        if request.role not in ROLES:
            raise invalid_argument("role", request.role, f"expected one of {', '.join(ROLES)}")
        engine = self.ctx.require_engine()
        if not request.replace and any(
            u.username == request.username for u in users.list_users(engine)
        ):
            raise _exists(request.username)
        try:
            user = users.create_user(
                engine, request.username, request.password, request.role, replace=request.replace
            )
        except UserError as err:
            if "exists" in str(err):
                raise _exists(request.username) from None
            raise StatusError(grpc.StatusCode.INVALID_ARGUMENT, str(err)) from None
        return user_pb2.User(
            username=user.username, role=user.role, created_at=convert.ts(user.created_at)
        )

    @translate_errors
    def VerifyUser(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not bounds.clean_or_empty(request.password, MAX_PASSWORD) or not USERNAME.fullmatch(
            request.username
        ):  # no such user can exist: not a DB question
            return user_pb2.VerifyUserResponse(ok=False)
        engine = self.ctx.require_engine()
        if not self._checking.acquire(timeout=CHECK_WAIT):
            raise PasswordChecksBusy(CHECK_WAIT)
        try:
            self.checks.inc()
            role = users.verify_user(engine, request.username, request.password)
        finally:
            self._checking.release()
        return user_pb2.VerifyUserResponse(ok=role is not None, role=role or "")

    @translate_errors
    def GetPasswordHash(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not USERNAME.fullmatch(request.username):  # no such user can exist
            return user_pb2.GetPasswordHashResponse(found=False)
        found = users.password_hash(self.ctx.require_engine(), request.username)
        if found is None:
            return user_pb2.GetPasswordHashResponse(found=False)
        stored, role = found
        return user_pb2.GetPasswordHashResponse(found=True, password_hash=stored, role=role)

    @translate_errors
    def ListUsers(self, request: Any, context: grpc.ServicerContext) -> Any:
        return user_pb2.ListUsersResponse(
            users=[
                user_pb2.User(username=u.username, role=u.role, created_at=convert.ts(u.created_at))
                for u in users.list_users(self.ctx.require_engine())
            ]
        )

    @translate_errors
    def DeleteUser(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not request.username:
            raise invalid_argument("username", request.username, "must not be empty")
        bounds.ident("username", request.username)
        deleted = users.delete_user(self.ctx.require_engine(), request.username)
        return user_pb2.DeleteUserResponse(deleted=deleted)


def _checks_counter(ctx: ApiContext) -> Counter:
    """``raftsched_password_checks_total`` in the node's /metrics registry (a registry of its
    own when the node has none, or when another servicer registered it there first)."""
    instruments = getattr(ctx.node, "instruments", None)
    registry = getattr(instruments, "registry", None) or CollectorRegistry()
    doc = "Passwords this node checked (VerifyUser); webservers check their logins themselves."
    try:
        return Counter("raftsched_password_checks", doc, registry=registry)
    except ValueError:  # already there (a second servicer on one node, in tests)
        return Counter("raftsched_password_checks", doc, registry=CollectorRegistry())


def _exists(username: str) -> StatusError:
    return StatusError(
        grpc.StatusCode.ALREADY_EXISTS,
        f"user {username!r} exists already; pick another name, or pass replace to change its"
        " password and role",
    )
