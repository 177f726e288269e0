"""``conn`` in a template: ``{{ conn.ID.host }}``, ``{{ conn.get("ID").password }}``, as in
Airflow's templates.

A connection a template names declares itself for an Airflow task (``raftsched.airflow``
``declare_template_variables``, like ``{{ var.value.NAME }}``), so the worker fetches it for the
attempt before rendering (``worker/task_secrets.py``); its credential parts are masked in the
attempt's output as for any declared connection. Airflow's attribute names: ``conn_id``,
``conn_type``, ``host``, ``port``, ``login``, ``password``, ``schema``, ``extra``,
``extra_dejson``, ``get_uri()``. Without values (the task page) every attribute is ``***``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from raftsched import secrets

MASKED = "***"

# A template block ({{ ... }} or {% ... %}) and, inside one, conn.ID or conn.get("ID"): only
# inside a block, so that "conn.txt" in a plain command declares nothing
_BLOCK = re.compile(r"\{[{%](.*?)[}%]\}", re.DOTALL)
_CONN = re.compile(r"""\bconn\.(?:get\(\s*\\?['"]([^'"\\]+)|([A-Za-z_][A-Za-z0-9_]*))""")


def named_connections(text: str) -> list[str]:
    """The connection ids the templates in ``text`` name."""
    found = {a or b for block in _BLOCK.findall(text) for a, b in _CONN.findall(block)}
    return sorted(name for name in found if name != "get")


class TemplateConnection:
    """A connection under Airflow's attribute names (a template reads them)."""

    def __init__(self, conn: secrets.Connection) -> None:
        self._uri = conn.uri
        self.conn_id, self.conn_type = conn.conn_id, conn.conn_type
        self.host, self.port, self.login = conn.host, conn.port, conn.login
        self.password, self.schema, self.extra = conn.password, conn.schema, conn.extra

    @property
    def extra_dejson(self) -> dict[str, Any]:
        return dict(parse_qsl(self.extra))

    def get_uri(self) -> str:
        return self._uri

    def __str__(self) -> str:
        return secrets.masked_uri(self._uri)


class _Masked:
    """What the task page shows for a declared connection: ``***`` for every part."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return MASKED

    def get_uri(self) -> str:
        return MASKED

    def __str__(self) -> str:
        return MASKED


class Connections:
    """``conn``: the connections the task declared. ``uris`` None: the task page."""

    def __init__(self, uris: Mapping[str, str] | None, declared: Iterable[str]) -> None:
        self._uris = uris
        self._declared = frozenset(declared)

    def get(self, conn_id: str, default: Any = None) -> Any:
        if self._uris is None:
            return _Masked() if conn_id in self._declared else default
        uri = self._uris.get(conn_id)
        if uri is None:
            return default
        return TemplateConnection(secrets.parse_connection(uri, conn_id))

    def __getattr__(self, conn_id: str) -> Any:
        if conn_id.startswith("_"):
            raise AttributeError(conn_id)
        missing = object()
        found = self.get(conn_id, missing)
        if found is missing:
            raise KeyError(
                f"connection {conn_id!r} is not declared by this task (declare it:"
                " connections=[...], or name it in a template of an Airflow task)"
            )
        return found


def connections(
    task_env: Iterable[tuple[str, str]] | Mapping[str, str],
    secret_env: Iterable[tuple[str, str]] | None,
) -> Connections:
    """``conn`` for a template (``secret_env`` None: the task page)."""
    pairs = task_env.items() if isinstance(task_env, Mapping) else task_env
    declared = secrets.declared(list(pairs))[1]
    uris = None
    if secret_env is not None:
        prefix = secrets.CONN_ENV_PREFIX
        uris = {k[len(prefix) :]: v for k, v in secret_env if k.startswith(prefix)}
    return Connections(uris, declared)


__all__ = ["Connections", "TemplateConnection", "connections", "named_connections"]
