"""An attempt's on-demand secret channel, wired to its worker's transport and lease.

:func:`channel_for` makes the attempt's :class:`~raftsched.worker.secret_channel.SecretChannel`
(or None when the transport cannot resolve secrets) and adds its socket to the attempt's
environment. A read goes to the cluster as ``ResolveSecrets`` with ``on_demand`` and this
attempt's key, fencing token and worker id: the node decides (lease live, DAG allowed, audit
record) and the task gets the node's message when it refuses (docs/architecture.md §22).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from raftsched import secrets as sx
from raftsched.errors import RaftschedError, ReadRefused
from raftsched.worker import task_user
from raftsched.worker.secret_channel import (
    NOT_FOUND,
    REFUSED,
    RESTRICTED,
    SOCKET_ENV,
    SecretChannel,
)

if TYPE_CHECKING:
    from raftsched.worker.runner import Attempt

# gRPC status names the task sees as themselves (anything else: refused, with the message)
_CODES = {"NOT_FOUND": NOT_FOUND, "PERMISSION_DENIED": RESTRICTED}


def channel_for(transport: Any, worker_id: str, attempt: Attempt) -> SecretChannel | None:
    resolve_secrets = getattr(transport, "resolve_secrets", None)
    if resolve_secrets is None:
        return None
    a = attempt.assignment

    def resolve(kind: str, name: str) -> str:
        variables = [name] if kind == sx.VARIABLE else []
        connections = [name] if kind == sx.CONNECTION else []
        try:
            values = resolve_secrets(
                a.key, a.token, worker_id, variables, connections, on_demand=True
            )
        except RaftschedError as err:  # ApiError: the node's message names no value
            code = getattr(getattr(err, "code", None), "name", "")
            raise ReadRefused(
                _CODES.get(code, REFUSED), str(getattr(err, "message", "") or err)
            ) from None
        value = values.get((kind, name))
        if value is None:
            raise ReadRefused(NOT_FOUND, f"the cluster did not answer {kind} {name}")
        return value

    user = task_user.current()
    channel = SecretChannel(
        resolve,
        session=lambda: attempt.pid,
        on_value=attempt.add_masked,
        uid=user.uid if user is not None else None,
    )
    attempt.assignment = replace(a, env=(*a.env, (SOCKET_ENV, channel.path)))
    return channel


__all__ = ["channel_for"]
