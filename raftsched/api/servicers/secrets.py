"""SecretService: variables and connections, encrypted here before they enter the Raft log.

This node holds the Fernet keys (``[secrets] fernet_key``): it encrypts a value it is given
and proposes ``SetSecret`` with the ciphertext; it decrypts only for an admin's ``reveal`` and
for a worker that holds the live lease of a task declaring the name, or reading it on demand
once ``ReadSecrets`` committed (``ResolveSecrets``, ``on_demand_secrets.py``), of a DAG the
name is not restricted away from (``core/secret_policy.py``); or for a triggerer that holds
the lease of the trigger the deferred task waits on. An
operator's ``GetSecret`` of a connection shows its parts with every credential part (password,
path past its first segment, query values, fragment: ``secrets.masked_connection``) masked.
Nothing here logs a value, and no error message quotes one. A node without a key refuses every
call that needs one with FAILED_PRECONDITION saying how to make a key (ListSecrets, which
shows names only, works without).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import grpc

from raftsched import secrets as sx
from raftsched.api.auth import Role, caller_role
from raftsched.api.gen import secret_pb2, secret_pb2_grpc
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.context import ApiContext
from raftsched.api.servicers.on_demand_secrets import resolve_on_demand
from raftsched.api.status import invalid_argument, translate_errors
from raftsched.core import callbacks as cb
from raftsched.core import commands as c
from raftsched.core import handlers_secrets as hs
from raftsched.core import limits, mapping
from raftsched.core import results as r
from raftsched.core import secret_policy as policy
from raftsched.core.model import TaskKey, TaskState
from raftsched.core.results import Result
from raftsched.errors import SecretDecryptError, SecretsNotConfigured, StatusError

Code = grpc.StatusCode


class SecretServicer(secret_pb2_grpc.SecretServiceServicer):
    def __init__(self, ctx: ApiContext, fernet_keys: Iterable[str] = ()) -> None:
        self.ctx = ctx
        self._keys = tuple(fernet_keys)
        self._box: sx.SecretBox | None = None

    def box(self) -> sx.SecretBox:
        if self._box is None:
            try:
                self._box = sx.SecretBox(self._keys)
            except SecretsNotConfigured as err:
                raise StatusError(Code.FAILED_PRECONDITION, str(err)) from None
        return self._box

    # -- admin and people -------------------------------------------------------------------

    @translate_errors
    def SetSecret(self, request: Any, context: grpc.ServicerContext) -> Any:
        kind, key = _kind(request.kind), _key(request.key)
        value = request.value
        if not value:
            raise invalid_argument("value", "", "must not be empty")
        if len(value) > limits.MAX_SECRET_VALUE_CHARS:
            raise invalid_argument(
                "value",
                f"<{len(value)} characters>",
                f"at most {limits.MAX_SECRET_VALUE_CHARS} characters",
            )
        if not limits.is_clean(value):
            raise invalid_argument("value", "<hidden>", "must not contain NUL or invalid UTF-8")
        if kind == sx.CONNECTION:
            try:
                sx.parse_connection(value, key)
            except ValueError as err:  # the message never quotes the URI (its password)
                raise StatusError(Code.INVALID_ARGUMENT, str(err)) from None
        limits.check_text("description", request.description, limits.MAX_SECRET_DESCRIPTION_CHARS)
        dags = policy.normalized(request.dags)
        policy.check_dags("dags", dags)  # LimitExceeded: INVALID_ARGUMENT naming the field
        box = self.box()
        current = self._record(kind, key)
        if (
            current is not None
            and current.description == request.description
            and current.dags == dags
            and _same(box, current.ciphertext, value)
        ):  # Fernet tokens differ each time: compare values, or every set would change
            return secret_pb2.SetSecretResponse(changed=False, freshness=self.ctx.freshness())
        command = self.ctx.make(
            c.SetSecret,
            bounds.request_id(request.request_id),
            kind=kind,
            key=key,
            ciphertext=box.encrypt(value),
            description=request.description,
            dags=dags,  # not () only from cluster version 3 (the gate)
        )
        result = self.ctx.propose(command, context)
        _raise(result, kind, key)
        return secret_pb2.SetSecretResponse(
            changed=result.reason != r.UNCHANGED, freshness=self.ctx.freshness()
        )

    @translate_errors
    def GetSecret(self, request: Any, context: grpc.ServicerContext) -> Any:
        kind, key = _kind(request.kind), _key(request.key)
        if request.reveal and caller_role() is not Role.ADMIN:
            raise StatusError(
                Code.PERMISSION_DENIED, "revealing a value needs role admin; leave out --reveal"
            )
        record, fresh = self.ctx.read(lambda st: st.secret_records(kind).get(key))
        if record is None:
            raise _not_found(kind, key)
        # a variable's masked form needs no key; a connection's parts and reveal do
        needs_value = request.reveal or kind == sx.CONNECTION
        value = self.box().decrypt(record.ciphertext) if needs_value else ""
        out = secret_pb2.Secret(
            kind=kind,
            key=key,
            description=record.description,
            updated_at=convert.ts(record.updated_at),
            freshness=fresh,
            dags=record.dags,
        )
        if kind == sx.CONNECTION:
            out.masked = sx.masked_uri(value)
            # an operator sees the shape (host, login, keys); every credential part is ***
            shown = sx.parse_connection if request.reveal else sx.masked_connection
            conn = shown(value, key)
            out.connection.CopyFrom(
                secret_pb2.ConnectionParts(
                    conn_type=conn.conn_type,
                    host=conn.host,
                    port=conn.port or 0,
                    login=conn.login,
                    has_password=bool(conn.password),  # *** when masked
                    schema=conn.schema,
                    extra=conn.extra,
                )
            )
        else:
            out.masked = sx.MASK
        if request.reveal:
            out.value = value
        return out

    @translate_errors
    def ListSecrets(self, request: Any, context: grpc.ServicerContext) -> Any:
        kind = _kind(request.kind)
        records, fresh = self.ctx.read(lambda st: sorted(st.secret_records(kind).items()))
        return secret_pb2.ListSecretsResponse(
            secrets=[
                secret_pb2.Secret(
                    kind=kind,
                    key=key,
                    description=rec.description,
                    updated_at=convert.ts(rec.updated_at),
                    dags=rec.dags,
                )
                for key, rec in records
            ],
            freshness=fresh,
        )

    @translate_errors
    def DeleteSecret(self, request: Any, context: grpc.ServicerContext) -> Any:
        kind, key = _kind(request.kind), _key(request.key)
        command = self.ctx.make(
            c.DeleteSecret, bounds.request_id(request.request_id), kind=kind, key=key
        )
        result = self.ctx.propose(command, context)
        _raise(result, kind, key)
        return secret_pb2.DeleteSecretResponse(freshness=self.ctx.freshness())

    @translate_errors
    def RotateSecrets(self, request: Any, context: grpc.ServicerContext) -> Any:
        box = self.box()
        self.ctx.read_index(context)  # every value set before this call is here
        records, _ = self.ctx.read(
            lambda st: [
                (k, n, rec.ciphertext, rec.description)
                for k in sx.KINDS
                for n, rec in st.secret_records(k).items()
            ]
        )
        restricted, _ = self.ctx.read(
            lambda st: {(k, n): rec.dags for (k, n), rec in st.secrets.items() if rec.dags}
        )
        base = bounds.request_id(request.request_id)
        commands = [
            self.ctx.make(
                c.SetSecret,
                f"{base}:{hashlib.sha256(f'{kind}:{key}'.encode()).hexdigest()[:16]}"
                if base
                else "",
                kind=kind,
                key=key,
                ciphertext=new,
                description=description,
                expected=old,  # a value set meanwhile is kept
                actor="",  # a re-encryption changes no value: no audit record per key
                dags=restricted.get((kind, key), ()),  # who may read it stays as it was
            )
            for kind, key, new, description, old in sx.rotation_plan(box, records)
        ]
        rotated = skipped = 0
        for start in range(0, len(commands), 500):  # bounded Raft entries
            batch = self.ctx.make(c.Batch, "", commands=tuple(commands[start : start + 500]))
            result = self.ctx.propose(batch, context)
            for item in result.value or ():
                if item.ok:
                    rotated += 1
                else:
                    skipped += 1
        return secret_pb2.RotateSecretsResponse(
            rotated=rotated, skipped=skipped, freshness=self.ctx.freshness()
        )

    # -- workers ----------------------------------------------------------------------------

    @translate_errors
    def ResolveSecrets(self, request: Any, context: grpc.ServicerContext) -> Any:
        key = TaskKey(
            bounds.ident("key.dag_id", request.key.dag_id),
            bounds.ident("key.run_id", request.key.run_id),
            bounds.ident("key.task_id", request.key.task_id),
        )
        worker_id = bounds.ident("worker_id", request.worker_id)
        wanted = [(sx.VARIABLE, _key(n)) for n in request.variables]
        wanted += [(sx.CONNECTION, _key(n)) for n in request.connections]
        found = self._lease_view(key, int(request.token), worker_id)
        if found is None:  # maybe granted after this replica's state: catch up once
            self.ctx.read_index(context)
            found = self._lease_view(key, int(request.token), worker_id)
        if found is None:
            raise StatusError(
                Code.FAILED_PRECONDITION,
                f"no live lease of {key.dag_id}/{key.run_id}/{key.task_id} with token"
                f" {request.token} held by this worker",
            )
        declared, records = found
        box = self.box()
        if request.on_demand:  # undeclared: committed (lease, policy, audit) before decrypting
            read = resolve_on_demand(
                self.ctx, context, request, key, worker_id, wanted, box.decrypt
            )
            return secret_pb2.ResolveSecretsResponse(
                values=[secret_pb2.SecretValue(kind=k, key=n, value=v) for k, n, v in read],
                freshness=self.ctx.freshness(),
            )
        values = []
        for kind, name in wanted:
            if name not in declared[kind]:
                raise StatusError(
                    Code.PERMISSION_DENIED,
                    f"task {key.task_id} does not declare {kind} {name}: add it to the task's"
                    f" {'secrets' if kind == sx.VARIABLE else 'connections'}= in the DAG file",
                )
            rec = records.get((kind, name))
            if rec is None:
                raise _not_found(kind, name)
            why = policy.refusal(kind, name, rec.dags, key.dag_id)  # declared or not
            if why is not None:
                raise StatusError(Code.PERMISSION_DENIED, why)
            values.append(
                secret_pb2.SecretValue(kind=kind, key=name, value=box.decrypt(rec.ciphertext))
            )
        return secret_pb2.ResolveSecretsResponse(values=values, freshness=self.ctx.freshness())

    def _lease_view(
        self, key: TaskKey, token: int, worker_id: str
    ) -> tuple[dict[str, set[str]], dict[tuple[str, str], hs.SecretRecord]] | None:
        """What the task declares and the ciphertexts, if ``worker_id`` holds its lease."""

        def view(st: Any) -> Any:
            ti = st.task_instance(key)
            lease = None if ti is None else ti.lease
            trigger = st.triggers.get(key)
            # a triggerer running a deferred task's trigger (a SQL trigger's connection) holds
            # what the task declares, as its worker would (docs/architecture.md §17)
            triggered = (
                ti is not None
                and ti.state is TaskState.DEFERRED
                and trigger is not None
                and trigger.token == token
                and trigger.triggerer_id == worker_id
            )
            if not triggered and (
                ti is None
                or ti.state is not TaskState.RUNNING
                or lease is None
                or lease.token != token
                or lease.worker_id != worker_id
            ):
                # a callback job's lease: its notifier's connection only (core/callbacks.py)
                variables, connections = [], callback_connections(st, key, token, worker_id)
                if not connections:
                    return None
            else:
                spec = st.run_spec(key.dag_id, key.run_id)
                try:
                    task = spec.task(mapping.task_of(key.task_id))
                    variables, connections = sx.declared(task.env)
                except (AttributeError, KeyError, ValueError):
                    return None
            records = {
                (kind, name): rec
                for kind in sx.KINDS
                for name, rec in st.secret_records(kind).items()
            }
            return {sx.VARIABLE: set(variables), sx.CONNECTION: set(connections)}, records

        found, _ = self.ctx.read(view)
        return found

    def _record(self, kind: str, key: str) -> hs.SecretRecord | None:
        record, _ = self.ctx.read(lambda st: st.secret_records(kind).get(key))
        return record


def callback_connections(st: Any, key: TaskKey, token: int, worker_id: str) -> list[str]:
    """The connections the notifiers of the callback jobs of ``key``'s run leased under
    ``token`` to ``worker_id`` name (one lease may hold several jobs); else []."""
    mine = (token, worker_id, key.dag_id, key.run_id)
    return [
        conn_id
        for job in st.callbacks.running_jobs()
        if (job.token, job.worker_id, job.dag_id, job.run_id) == mine
        and (conn_id := cb.declared_connection(job.kwargs_json))
    ]


def _same(box: sx.SecretBox, ciphertext: str, value: str) -> bool:
    try:
        return box.decrypt(ciphertext) == value
    except SecretDecryptError:
        return False


def _kind(value: str) -> str:
    if value not in sx.KINDS:
        raise invalid_argument("kind", value[:40], f"expected one of {', '.join(sx.KINDS)}")
    return value


def _key(value: str) -> str:
    try:
        return sx.check_key(value)
    except ValueError as err:
        raise StatusError(Code.INVALID_ARGUMENT, str(err)) from None


def _not_found(kind: str, key: str) -> StatusError:
    add = "variables set" if kind == sx.VARIABLE else "connections add"
    return StatusError(Code.NOT_FOUND, f"no {kind} {key!r}; set it with `raftsched {add}`")


def _raise(result: Result, kind: str, key: str) -> None:
    if result.ok:
        return
    if result.reason == hs.UNKNOWN_SECRET:
        raise _not_found(kind, key)
    if result.reason == hs.TOO_MANY_SECRETS:
        raise StatusError(Code.RESOURCE_EXHAUSTED, str(result.value))
    raise StatusError(Code.FAILED_PRECONDITION, f"{kind} {key}: {result.reason}: {result.value}")
