"""The variables and connections an attempt declared, fetched just before it starts.

A task names what it reads (``secrets=``/``connections=``, carried as the
``RAFTSCHED_SECRETS`` entry of its env: names only). The worker looks each name up in its own
backends first (:class:`raftsched.secrets.EnvSecretsBackend`: ``RAFTSCHED_SECRET_VAR_<NAME>``
in the worker's environment), then asks the cluster for the rest
(``WorkerTransport.resolve_secrets``: the node checks that this worker holds the attempt's
lease and that the task declares each name). The values go into the attempt's environment
only (``Assignment.secret_env``: ``RAFTSCHED_VAR_<NAME>``, ``RAFTSCHED_CONN_<ID>``) and into
the maskers of its output (``runner.Attempt``); they are never logged. Names it did not
declare it may read while it runs, through its worker (``worker/secret_channel.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from raftsched import airflow_secrets as af
from raftsched import secrets as sx
from raftsched.errors import RaftschedError
from raftsched.worker.transport import Assignment

DEFAULT_BACKENDS: tuple[sx.SecretsBackend, ...] = (
    sx.EnvSecretsBackend(),
    af.AirflowEnvSecretsBackend(),
)


def with_secrets(
    transport: Any,
    worker_id: str,
    a: Assignment,
    backends: Sequence[sx.SecretsBackend] = DEFAULT_BACKENDS,
) -> Assignment:
    """``a`` with ``secret_env`` filled; RaftschedError (a message without any value) when a
    declared value cannot be had."""
    try:
        variables, connections = sx.declared(a.env)
    except ValueError as err:
        raise RaftschedError(str(err)) from None
    # Airflow's environment backend: every AIRFLOW_VAR_*/AIRFLOW_CONN_* of the worker's own
    # environment is readable by any task, declared or not, as under Airflow; they travel
    # as secret values (masked in the attempt's output), never through the allow-list
    airflow_env = [
        pair for b in backends if isinstance(b, af.AirflowEnvSecretsBackend) for pair in b.entries()
    ]
    if not variables and not connections:
        return replace(a, secret_env=tuple(airflow_env)) if airflow_env else a
    wanted = [(sx.VARIABLE, n) for n in variables] + [(sx.CONNECTION, n) for n in connections]
    values: dict[tuple[str, str], str] = {}
    for ref in wanted:
        for backend in backends:
            found = backend.get(*ref)
            if found is not None:
                values[ref] = found
                break
    missing = [ref for ref in wanted if ref not in values]
    if missing:
        resolve = getattr(transport, "resolve_secrets", None)
        if resolve is None:
            raise RaftschedError("this worker's transport cannot fetch variables or connections")
        values.update(
            resolve(
                a.key,
                a.token,
                worker_id,
                [k for kind, k in missing if kind == sx.VARIABLE],
                [k for kind, k in missing if kind == sx.CONNECTION],
            )
        )
    env = []
    for kind, name in wanted:
        if (kind, name) not in values:
            raise RaftschedError(f"the cluster did not answer {kind} {name}")
        env_name = sx.var_env(name) if kind == sx.VARIABLE else sx.conn_env(name)
        env.append((env_name, values[(kind, name)]))
    return replace(a, secret_env=tuple(env + airflow_env))


def masked_values(a: Assignment) -> list[str]:
    """Every text of ``a``'s secret values that its logs must not show."""
    out: list[str] = []
    for name, value in a.secret_env:
        if name.startswith(af.CONN_PREFIX):  # a URI or Airflow's JSON: mask the URI's parts
            out.append(value)
            try:
                value = af.connection_uri(name.removeprefix(af.CONN_PREFIX), value)
            except ValueError:
                continue
        kind = (
            sx.CONNECTION if name.startswith((sx.CONN_ENV_PREFIX, af.CONN_PREFIX)) else sx.VARIABLE
        )
        out += sx.mask_values(kind, value)
    return out
