"""Airflow's shapes of variables and connections, outside the DAG layer.

Three places meet Airflow's forms of a secret: ``raftsched variables|connections
import/export`` (Airflow's JSON files), the worker (Airflow's environment secrets backend:
``AIRFLOW_VAR_<KEY>``, ``AIRFLOW_CONN_<CONN_ID>`` in its environment) and the task side of
``raftsched.airflow`` (``Variable.get``, ``BaseHook.get_connection``). This module is the
one translation: an Airflow connection (a URI, or the JSON object ``{"conn_type", "host",
"login", "password", "schema", "port", "extra"}``) to raftsched's URI and back, and the
environment backend. It imports nothing of Airflow and needs no node.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from raftsched import secrets as sx

VAR_PREFIX = "AIRFLOW_VAR_"
CONN_PREFIX = "AIRFLOW_CONN_"
FIELDS = ("conn_type", "host", "login", "password", "schema", "port", "extra", "description")
# How many AIRFLOW_VAR_/AIRFLOW_CONN_ entries a worker passes to one attempt: an environment
# is the operator's, but a runaway one must not make every attempt's environment huge
MAX_ENV_ENTRIES = 200


def var_env(key: str) -> str:
    """Airflow's name for a variable in the environment (the key upper-cased)."""
    return VAR_PREFIX + key.upper()


def conn_env(conn_id: str) -> str:
    return CONN_PREFIX + conn_id.upper()


def connection_uri(conn_id: str, value: Any) -> str:
    """raftsched's URI for an Airflow connection: a URI string as it is, or Airflow's JSON
    object (``extra`` an object or JSON text; its values become the URI's query). ValueError
    naming ``conn_id`` (never a value) when it is neither."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                return connection_uri(conn_id, json.loads(text))
            except json.JSONDecodeError:
                raise ValueError(f"connection {conn_id}: not valid JSON") from None
        sx.parse_connection(text, conn_id)  # ValueError without the URI
        return text
    if not isinstance(value, Mapping):
        raise ValueError(
            f"connection {conn_id}: expected a URI string or an object with conn_type, host,"
            " login, password, schema, port, extra"
        )
    unknown = sorted(str(k) for k in value if k not in FIELDS)
    if unknown:
        raise ValueError(f"connection {conn_id}: unknown field(s) {unknown[:5]}")
    conn_type = str(value.get("conn_type") or "")
    if not conn_type:
        raise ValueError(f"connection {conn_id}: conn_type is required")
    scheme = conn_type.replace("_", "-")  # a URI scheme has no "_"; Airflow's get_uri does this
    login, password = str(value.get("login") or ""), str(value.get("password") or "")
    auth = quote(login, safe="") + (":" + quote(password, safe="") if password else "")
    host = str(value.get("host") or "")
    port = value.get("port")
    if port not in (None, ""):
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise ValueError(f"connection {conn_id}: port must be a number") from None
    netloc = (auth + "@" if auth else "") + host + (f":{port}" if port not in (None, "") else "")
    schema = str(value.get("schema") or "")
    uri = f"{scheme}://{netloc}" + ("/" + quote(schema, safe="") if schema else "")
    extra = _extra(conn_id, value.get("extra"))
    if extra:
        uri += "?" + urlencode(extra)
    sx.parse_connection(uri, conn_id)
    return uri


def _extra(conn_id: str, extra: Any) -> dict[str, str]:
    if extra in (None, ""):
        return {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except json.JSONDecodeError:
            raise ValueError(f"connection {conn_id}: extra is not a JSON object") from None
    if not isinstance(extra, Mapping):
        raise ValueError(f"connection {conn_id}: extra is not a JSON object")
    # A query holds text: a nested value travels as its JSON text
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in extra.items()}


def connection_fields(conn_id: str, uri: str) -> dict[str, Any]:
    """Airflow's JSON object of a connection (what ``airflow connections export`` writes)."""
    conn = sx.parse_connection(uri, conn_id)
    return {
        "conn_type": conn.conn_type,
        "host": conn.host or None,
        "login": conn.login or None,
        "password": conn.password or None,
        "schema": conn.schema or None,
        "port": conn.port,
        "extra": json.dumps(dict(parse_qsl(conn.extra))) if conn.extra else None,
    }


class AirflowEnvSecretsBackend:
    """Airflow's environment backend on a worker: ``AIRFLOW_VAR_<KEY>`` and
    ``AIRFLOW_CONN_<CONN_ID>`` (a URI or Airflow's JSON object) of the worker's environment.
    Asked after raftsched's own ``RAFTSCHED_SECRET_*`` names (``secrets.SecretsBackend``)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    def get(self, kind: str, key: str) -> str | None:
        if kind == sx.VARIABLE:
            return self.environ.get(var_env(key))
        value = self.environ.get(conn_env(key))
        if value is None:
            return None
        try:
            return connection_uri(key, value)
        except ValueError:
            return None  # a malformed entry is as if absent: the cluster is asked next

    def entries(self) -> list[tuple[str, str]]:
        """Every ``AIRFLOW_VAR_*``/``AIRFLOW_CONN_*`` pair (name order, at most
        :data:`MAX_ENV_ENTRIES`): what a task's ``Variable.get`` may read undeclared, as under
        Airflow's backend."""
        names = sorted(
            n for n in self.environ if n.startswith((VAR_PREFIX, CONN_PREFIX)) and self.environ[n]
        )
        return [(n, self.environ[n]) for n in names[:MAX_ENV_ENTRIES]]


__all__ = [
    "CONN_PREFIX",
    "VAR_PREFIX",
    "AirflowEnvSecretsBackend",
    "conn_env",
    "connection_fields",
    "connection_uri",
    "var_env",
]
