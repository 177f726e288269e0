"""``ResolveSecrets`` with ``on_demand``: a value a task reads without declaring it.

The worker asks for a name its attempt's code read (``Variable.get``, ``BaseHook.get_connection``
of a name the task did not declare: ``worker/secret_channel.py``). Nothing is decrypted before
``core.secret_reads.ReadSecrets`` is committed: apply checks the lease is live (this token, this
worker, not expired), each name is set and the DAG may read it (``core/secret_policy.py``), and
records the read in the audit log. A refusal is a status the worker hands to the task as it is:
FAILED_PRECONDITION (stale lease), NOT_FOUND (not set), PERMISSION_DENIED (restricted).
docs/architecture.md §22.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from raftsched import secrets as sx
from raftsched.api.servicers.context import ApiContext
from raftsched.core import results as r
from raftsched.core import secret_policy as policy
from raftsched.core import secret_reads as sr
from raftsched.core.model import TaskKey
from raftsched.errors import StatusError

Code = grpc.StatusCode


def resolve_on_demand(
    ctx: ApiContext,
    context: grpc.ServicerContext,
    request: Any,
    key: TaskKey,
    worker_id: str,
    wanted: list[tuple[str, str]],
    decrypt: Callable[[str], str],
) -> list[tuple[str, str, str]]:
    """(kind, name, value) of each of ``wanted``, once the read is committed."""
    if not wanted:
        return []
    if len(wanted) > policy.MAX_NAMES_PER_READ:
        raise StatusError(
            Code.INVALID_ARGUMENT,
            f"at most {policy.MAX_NAMES_PER_READ} names per on-demand read, got {len(wanted)}",
        )
    out: list[tuple[str, str, str]] = []
    for kind in sx.KINDS:
        names = tuple(dict.fromkeys(n for k, n in wanted if k == kind))
        if not names:
            continue
        command = ctx.make(
            sr.ReadSecrets,
            "",  # a fresh id: a retried read is another read, recorded again
            key=key,
            token=int(request.token),
            worker_id=worker_id,
            kind=kind,
            names=names,
        )
        result = ctx.propose(command, context)
        if not result.ok:
            raise _refused(result, kind, key, int(request.token))
        # the committed state holds the ciphertext read with the decision: this node applied it
        records, _ = ctx.read(lambda st, k=kind, ns=names: [st.secrets.get((k, n)) for n in ns])
        for name, rec in zip(names, records, strict=True):
            if rec is None:  # deleted right after the read was committed
                raise StatusError(Code.NOT_FOUND, f"no {kind} {name!r}")
            out.append((kind, name, decrypt(rec.ciphertext)))
    return out


def _refused(result: Any, kind: str, key: TaskKey, token: int) -> StatusError:
    if result.reason == sr.RESTRICTED:
        return StatusError(Code.PERMISSION_DENIED, str(result.value))
    if result.reason == sr.UNKNOWN_SECRET:
        add = "variables set" if kind == sx.VARIABLE else "connections add"
        return StatusError(
            Code.NOT_FOUND, f"no {kind} {result.value!r}; set it with `raftsched {add}`"
        )
    if result.reason in (r.STALE_TOKEN, r.WRONG_WORKER, r.UNKNOWN_TASK, sr.LEASE_EXPIRED):
        return StatusError(
            Code.FAILED_PRECONDITION,
            f"no live lease of {key.dag_id}/{key.run_id}/{key.task_id} with token {token}"
            f" held by this worker ({result.reason})",
        )
    if result.reason == r.OUTBOX_FULL:
        return StatusError(
            Code.RESOURCE_EXHAUSTED,
            "the cluster's outbox is full (its database is behind): try the read again later",
        )
    return StatusError(Code.FAILED_PRECONDITION, f"{kind} read refused: {result.reason}")


__all__ = ["resolve_on_demand"]
