"""Bearer-token authentication and role checks for the gRPC API (a server interceptor).

Callers send ``authorization: Bearer <token>`` metadata. Each token configured in ``[api]
admin_tokens | operator_tokens | viewer_tokens | worker_tokens`` carries one role:

    admin ⊇ operator ⊇ viewer    people and the web: read (viewer), change DAGs and runs
                                 (operator), change the cluster (admin)
    worker                       WorkerService only (lease, heartbeat, complete, logs)

``admin`` may call everything, WorkerService included (one token for a standalone setup).
:data:`METHOD_ROLES` names the minimum role of every raftsched RPC; a raftsched method missing
from it needs admin (fail closed; a unit test keeps the table complete). The standard health
and reflection services need no token: load balancers and ``grpcurl`` probe them.

Tokens are compared with :func:`hmac.compare_digest` against every configured token (no early
exit), and never logged or echoed back.

No token configured at all: a server bound to loopback runs *open* (every caller is admin),
with a warning in the log, so a laptop's ``raftsched standalone`` works without setup. Any
other bind address refuses to start with a :class:`~raftsched.errors.ConfigError`: an open
scheduler on a network would let anyone run commands on the workers.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from enum import IntEnum
from typing import Any

import grpc

from raftsched.addresses import is_loopback
from raftsched.api.wrap import Behaviour, with_behaviour
from raftsched.config import ApiConfig
from raftsched.errors import ConfigError

log = logging.getLogger(__name__)

TOKEN_HINT = "pass --token or set RAFTSCHED_TOKEN"


class Role(IntEnum):
    """Roles, ordered for the people's chain: a higher one includes the lower ones. WORKER
    stands apart: it includes nothing and only admin includes it (see :func:`allows`)."""

    WORKER = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


def allows(have: Role, need: Role) -> bool:
    if have is Role.ADMIN:
        return True
    if need is Role.WORKER or have is Role.WORKER:
        return have is need
    return have >= need


_C = "/raftsched.v1.ClusterService/"
_D = "/raftsched.v1.DagService/"
_W = "/raftsched.v1.WorkerService/"
_U = "/raftsched.v1.UserService/"
_S = "/raftsched.v1.SecretService/"
_P = "/raftsched.v1.PoolService/"
_A = "/raftsched.v1.AssetService/"

METHOD_ROLES: Mapping[str, Role] = {
    _C + "GetStatus": Role.VIEWER,
    _C + "TransferLeadership": Role.ADMIN,
    _C + "AddNode": Role.ADMIN,
    _C + "RemoveNode": Role.ADMIN,
    _C + "ListAuditRecords": Role.ADMIN,
    _D + "ListDags": Role.VIEWER,
    _D + "GetDag": Role.VIEWER,
    _D + "ExplainSlot": Role.VIEWER,
    _D + "ListRuns": Role.VIEWER,
    _D + "ListTaskInstances": Role.VIEWER,
    _D + "GetTaskLog": Role.VIEWER,
    _D + "ListImportErrors": Role.VIEWER,
    _D + "GetDagSource": Role.VIEWER,
    _D + "PauseDag": Role.OPERATOR,
    _D + "UnpauseDag": Role.OPERATOR,
    _D + "TriggerDag": Role.OPERATOR,
    _D + "BackfillDag": Role.OPERATOR,
    _D + "ClearTasks": Role.OPERATOR,
    _D + "MarkTasks": Role.OPERATOR,
    _W + "Lease": Role.WORKER,
    _W + "Heartbeat": Role.WORKER,
    _W + "Complete": Role.WORKER,
    _W + "CompleteBatch": Role.WORKER,
    _W + "AppendLogs": Role.WORKER,
    _W + "Release": Role.WORKER,
    _W + "LeaseCallbacks": Role.WORKER,
    _W + "SignOff": Role.WORKER,
    _W + "ListWorkers": Role.VIEWER,
    _W + "CompleteCallback": Role.WORKER,
    _W + "Defer": Role.WORKER,
    _W + "LeaseTriggers": Role.WORKER,  # a triggerer authenticates as a worker
    _W + "HeartbeatTriggers": Role.WORKER,
    _W + "FireTriggers": Role.WORKER,
    _W + "ExternalRunState": Role.WORKER,  # a triggerer, under a trigger's lease
    _U + "CreateUser": Role.ADMIN,
    _U + "VerifyUser": Role.ADMIN,
    _U + "GetPasswordHash": Role.ADMIN,  # hashes: only the webserver needs them
    _U + "ListUsers": Role.ADMIN,
    _U + "DeleteUser": Role.ADMIN,
    _S + "SetSecret": Role.ADMIN,
    _S + "GetSecret": Role.OPERATOR,  # a value itself only to admin (caller_role)
    _S + "ListSecrets": Role.VIEWER,
    _S + "DeleteSecret": Role.ADMIN,
    _S + "RotateSecrets": Role.ADMIN,
    _S + "ResolveSecrets": Role.WORKER,
    _P + "ListPools": Role.VIEWER,
    _P + "SetPool": Role.OPERATOR,
    _P + "DeletePool": Role.OPERATOR,
    _A + "EmitAssetEvent": Role.OPERATOR,
    _A + "ListAssets": Role.VIEWER,
    _A + "GetAsset": Role.VIEWER,
}

# Services anyone may call without a token.
OPEN_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


def required_role(method: str) -> Role | None:
    """The minimum role for a full method name; None for the open services."""
    if method.startswith(OPEN_PREFIXES):
        return None
    return METHOD_ROLES.get(method, Role.ADMIN)


class TokenTable:
    """Configured tokens and their roles. Lookup is constant-time per token."""

    def __init__(
        self, tokens: Iterable[tuple[str, Role]], names: Iterable[tuple[str, str]] = ()
    ) -> None:
        self._tokens = tuple((token.encode(), role) for token, role in tokens if token)
        self._names = dict(names)  # caller_scope_of(token) -> its name in the audit log

    @classmethod
    def from_config(cls, api: ApiConfig) -> TokenTable:
        tokens = ((token, role) for role in Role for token in getattr(api, f"{role.label}_tokens"))
        return cls(tokens, getattr(api, "token_names", ()))

    def name_of(self, scope: str, role: Role) -> str:
        """The audit log's name of the token whose identity is ``scope``."""
        return self._names.get(scope) or f"{role.label} token {scope}"

    def __bool__(self) -> bool:
        return bool(self._tokens)

    def __repr__(self) -> str:
        return f"TokenTable({len(self._tokens)} tokens)"  # never the tokens themselves

    def role_of(self, token: str) -> Role | None:
        given = token.encode()
        found: Role | None = None
        for known, role in self._tokens:  # no early exit: timing says nothing about position
            if hmac.compare_digest(given, known):
                found = role
        return found


def check_open_allowed(api: ApiConfig, bind: str | None = None) -> None:
    """Raise ConfigError when no token is configured and the server (``bind``, default
    ``[api] grpc_bind``) is not loopback-only; log a warning when it runs open."""
    bind = bind or api.grpc_bind
    if TokenTable.from_config(api):
        return
    if is_loopback(bind):
        log.warning(
            "no [api] tokens configured: the gRPC API on %s is open to every local user"
            " (allowed on loopback only; set [api] admin_tokens to require tokens)",
            bind,
        )
        return
    raise ConfigError(
        f"[api] grpc_bind = {bind!r} is not a loopback address, and no API token is"
        " configured: set [api] admin_tokens (and operator_tokens, viewer_tokens,"
        " worker_tokens as needed), or bind to 127.0.0.1 for an open local server",
        key="api.admin_tokens",
    )


class AuthInterceptor(grpc.ServerInterceptor):
    """Checks the bearer token and role of every call before its handler runs.

    ``tokens`` empty means open mode (see the module docstring; :func:`check_open_allowed`
    is the caller's guard). Thread-safe: it holds no mutable state.
    """

    def __init__(self, tokens: TokenTable) -> None:
        self._tokens = tokens

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return handler
        metadata = handler_call_details.invocation_metadata or ()
        if not self._tokens:  # open: every caller is admin, and may say who it acts for
            return _as_caller(handler, "", Role.ADMIN, acting_as(OPEN_ACTOR, Role.ADMIN, metadata))
        method = handler_call_details.method
        need = required_role(method)
        if need is None:
            return handler
        denial = self._check(method, need, metadata)
        if denial is None:
            token = _bearer(metadata)
            role = self._tokens.role_of(token) or Role.VIEWER
            scope = caller_scope_of(token)
            actor = acting_as(self._tokens.name_of(scope, role), role, metadata)
            return _as_caller(handler, scope, role, actor)
        return _deny(handler, *denial)

    def _check(
        self, method: str, need: Role, metadata: Iterable[Any]
    ) -> tuple[grpc.StatusCode, str] | None:
        header = next((value for key, value in metadata if key == "authorization"), None)
        if header is None:
            return grpc.StatusCode.UNAUTHENTICATED, f"missing bearer token: {TOKEN_HINT}"
        if isinstance(header, bytes):
            header = header.decode(errors="replace")
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return (
                grpc.StatusCode.UNAUTHENTICATED,
                f"malformed authorization metadata: expected 'Bearer <token>'; {TOKEN_HINT}",
            )
        have = self._tokens.role_of(token.strip())
        if have is None:
            return (
                grpc.StatusCode.UNAUTHENTICATED,
                "unknown token: it is in none of this node's [api] admin_tokens,"
                " operator_tokens, viewer_tokens or worker_tokens; check --token /"
                " RAFTSCHED_TOKEN",
            )
        if allows(have, need):
            return None
        needed = "worker (or admin)" if need is Role.WORKER else f"{need.label} (or higher)"
        log.info("denied %s to a %s token", method, have.label)
        return (
            grpc.StatusCode.PERMISSION_DENIED,
            f"{method} needs role {needed}; this token has role {have.label}",
        )


# The identity of the call being handled in this thread ("" in open mode): the API scopes
# client-chosen request ids by it (``ApiContext.make``), so a caller that reuses another
# caller's request id never receives the other's result (e.g. its lease grants).
_CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("raftsched_caller", default="")
# The role of that caller (open mode: every caller is admin, and nothing sets it)
_ROLE: contextvars.ContextVar[Role] = contextvars.ContextVar("raftsched_role", default=Role.ADMIN)
# Who the caller is in the audit log (core/audit.py): the token's name, or "<user> via <token
# name>" when an admin token (the webserver's) says which user it acts for; "" outside a call
_ACTOR: contextvars.ContextVar[str] = contextvars.ContextVar("raftsched_actor", default="")
OPEN_ACTOR = "open API"  # a server without tokens: nobody is known
# The metadata key by which the webserver names its logged-in user
USER_METADATA = "x-raftsched-user"
MAX_USER_CHARS = 64  # a user name in an audit record; web user names are shorter
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def caller_actor() -> str:
    """The audit log's name of the caller whose call this thread is handling."""
    return _ACTOR.get()


def acting_as(name: str, role: Role, metadata: Iterable[Any]) -> str:
    """``name``, or "<user> via <name>" when an admin token names the user it acts for
    (bounded and sanitized: it is the client's text). Other roles cannot speak for anyone."""
    if role is not Role.ADMIN:
        return name
    raw = next((value for key, value in metadata if key == USER_METADATA), "")
    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    user = _UNPRINTABLE.sub("?", str(raw)).strip()[:MAX_USER_CHARS]
    return f"{user} via {name}" if user else name


def caller_role() -> Role:
    """The role of the caller whose call this thread is handling (ADMIN in open mode)."""
    return _ROLE.get()


def caller_scope() -> str:
    """The scope of the caller whose call this thread is handling ("" in open mode)."""
    return _CALLER.get()


def caller_scope_of(token: str) -> str:
    """A short, stable identity of a bearer token (never the token itself)."""
    return "c" + hashlib.sha256(token.encode()).hexdigest()[:10] if token else ""


def _bearer(metadata: Iterable[Any]) -> str:
    header = next((value for key, value in metadata if key == "authorization"), "")
    if isinstance(header, bytes):
        header = header.decode(errors="replace")
    return str(header).strip().partition(" ")[2].strip()


def _as_caller(
    handler: grpc.RpcMethodHandler, scope: str, role: Role = Role.VIEWER, actor: str = ""
) -> grpc.RpcMethodHandler:
    """``handler`` with :func:`caller_scope` set to ``scope`` (and :func:`caller_role` to
    ``role``, :func:`caller_actor` to ``actor``) while its behaviour runs."""
    if handler.request_streaming:  # no raftsched call streams requests
        return handler

    # Set for the call and reset after it: a caller's scope never outlives its call in the
    # thread (a servicer called directly afterwards, as tests do, saw a stale scope).
    def unary(behaviour: Behaviour) -> Behaviour:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            with _as(scope, role, actor):
                return behaviour(request, context)

        return call

    def stream(behaviour: Behaviour) -> Behaviour:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            with _as(scope, role, actor):
                yield from behaviour(request, context)

        return call

    return with_behaviour(handler, unary, stream)


@contextlib.contextmanager
def _as(scope: str, role: Role, actor: str = "") -> Iterator[None]:
    caller, as_role, as_actor = _CALLER.set(scope), _ROLE.set(role), _ACTOR.set(actor)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            _ACTOR.reset(as_actor)
        with contextlib.suppress(ValueError):  # a stream closed in another context
            _ROLE.reset(as_role)
        with contextlib.suppress(ValueError):
            _CALLER.reset(caller)


def _deny(
    handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that only aborts with (code, message)."""

    def abort(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, message)

    def abort_stream(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, message)
        yield  # pragma: no cover - makes this a generator, as streaming handlers are

    streaming_out = handler.response_streaming
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(bool(handler.request_streaming), bool(streaming_out))]
    return make(
        abort_stream if streaming_out else abort,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
