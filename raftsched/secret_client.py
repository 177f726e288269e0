"""The task's side of an on-demand read: a variable or connection the task did not declare.

``raftsched.secrets.get_variable``/``get_connection`` (and through them Airflow's
``Variable.get`` and ``BaseHook.get_connection``) ask here for a name that is not in the
task's environment. The worker serves the attempt's socket (``RAFTSCHED_SECRETS_SOCKET``,
``worker/secret_channel.py``): it asks the cluster with its lease, never the task; the task
holds no token. A value read once is kept for the rest of the process.

- not set: KeyError (so ``Variable.get(name, default_var=...)`` answers its default);
- restricted to other DAGs: :class:`SecretAccessDenied` ("variable X is restricted to DAGs
  a,b: ..."), never swallowed by a default;
- no socket (a DAG file being parsed, ``tasks test``): None, and the caller says to declare.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from raftsched.core.limits import MAX_SECRET_VALUE_CHARS
from raftsched.errors import RaftschedError, SecretAccessDenied

SOCKET_ENV = "RAFTSCHED_SECRETS_SOCKET"  # worker/secret_channel.py's
TIMEOUT = 60.0  # seconds: the worker commits a Raft entry before it answers
# A value's JSON text: each character at most 12 bytes ("\ud83d\ude00"), and room for an error
MAX_REPLY_BYTES = 12 * MAX_SECRET_VALUE_CHARS + 4096
_cache: dict[tuple[str, str], str] = {}


def read(kind: str, name: str) -> str | None:
    """The value of ``kind`` ``name`` through the worker; None when there is no channel."""
    cached = _cache.get((kind, name))
    if cached is not None:
        return cached
    path = os.environ.get(SOCKET_ENV)
    if not path:
        return None
    reply = _ask(path, {"kind": kind, "name": name})
    if "value" in reply and isinstance(reply["value"], str):
        _cache[(kind, name)] = reply["value"]
        return reply["value"]
    message = str(reply.get("error") or "the worker gave no value")
    if reply.get("code") == "not_found":
        raise KeyError(message)
    raise SecretAccessDenied(message)


def _ask(path: str, request: dict[str, str]) -> dict[str, Any]:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT)
            sock.connect(path)
            sock.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n") and len(data) <= MAX_REPLY_BYTES:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError as err:
        kind = request["kind"]
        raise RaftschedError(f"cannot reach this attempt's worker for a {kind}: {err}") from None
    try:
        reply = json.loads(data.decode())
    except ValueError:
        raise RaftschedError("the worker's answer was not understood") from None
    return reply if isinstance(reply, dict) else {}


__all__ = ["SOCKET_ENV", "SecretAccessDenied", "read"]
