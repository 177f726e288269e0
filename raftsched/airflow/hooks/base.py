"""``airflow.hooks.base``: ``BaseHook.get_connection(conn_id)`` inside a task.

The connection must be declared by the task (``connections=["ID"]`` on the operator or
``@task``): the worker fetches it for that attempt (``RAFTSCHED_CONN_ID``); an undeclared
one, or a read while the DAG file is parsed, is a KeyError saying how to declare it. The
result has Airflow's attribute names (``host``, ``port``, ``login``, ``password``,
``schema``, ``conn_type``, ``extra_dejson``, ``get_uri()``); ``extra`` is the URI's query.
``AIRFLOW_CONN_<CONN_ID>`` in the task's environment (a URI or Airflow's JSON object) is read
first, as Airflow's environment secrets backend does.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl

from raftsched import airflow_secrets, secrets


class AirflowConnection:
    """A declared raftsched connection under Airflow's names; repr never shows the password."""

    def __init__(self, conn: secrets.Connection) -> None:
        self._conn = conn
        self.conn_id = conn.conn_id
        self.conn_type = conn.conn_type
        self.host = conn.host
        self.port = conn.port
        self.login = conn.login
        self.password = conn.password
        self.schema = conn.schema
        self.extra = conn.extra

    @property
    def extra_dejson(self) -> dict[str, Any]:
        return dict(parse_qsl(self.extra))

    def get_uri(self) -> str:
        return self._conn.uri

    def __repr__(self) -> str:
        return repr(self._conn)


class BaseHook:
    """Only ``get_connection``: a hook class of Airflow's providers does not run here."""

    @classmethod
    def get_connection(cls, conn_id: str) -> AirflowConnection:
        # Airflow's environment backend first (AIRFLOW_CONN_<CONN_ID>: a URI or Airflow's
        # JSON object), then the connection the worker resolved for this attempt
        value = os.environ.get(airflow_secrets.conn_env(conn_id))
        if value is not None:
            uri = airflow_secrets.connection_uri(conn_id, value)
            return AirflowConnection(secrets.parse_connection(uri, conn_id))
        return AirflowConnection(secrets.get_connection(conn_id))


__all__ = ["AirflowConnection", "BaseHook"]
