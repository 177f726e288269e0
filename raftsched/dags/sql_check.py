"""One SQL check, shared by ``SqlSensor``'s poke (on a worker) and the ``sql`` trigger (on a
triggerer): run a query through SQLAlchemy on a connection's URI and say whether it returned
a row (docs/architecture.md §17).

A connection URI is raftsched's (``postgresql://user:pass@host:5432/db``,
``sqlite:////abs/file.db``); the schemes SQLAlchemy names otherwise are mapped
(:func:`sqlalchemy_url`). Each check opens one connection and closes it: a sensor pokes
seconds apart, and a pool held per trigger would be thousands of idle connections on a
triggerer. A query gets ``STATEMENT_TIMEOUT`` seconds where the driver allows a timeout
(SQLite's busy wait, libpq's connect timeout); the row returned is cut to ``MAX_ROW_CHARS``
of JSON, since it travels as the trigger's event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

CONNECT_TIMEOUT = 10  # seconds
MAX_ROW_CHARS = 16_384  # of the row's JSON, as the event carries it
MAX_SQL_CHARS = 8_192

# raftsched/Airflow scheme -> SQLAlchemy's dialect+driver (the drivers raftsched itself uses)
_SCHEMES = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "sqlite": "sqlite",
}


def sqlalchemy_url(uri: str) -> str:
    """The SQLAlchemy URL of a connection URI: ``postgres(ql)://`` uses psycopg 3; a scheme
    that already names a driver (``postgresql+psycopg2://``, ``mysql+pymysql://``) is kept."""
    scheme, sep, rest = uri.partition(":")
    if not sep or not scheme:
        raise ValueError("a SQL connection must be a URI such as postgresql://user@host/db")
    return _SCHEMES.get(scheme.lower(), scheme) + ":" + rest


def check_sql(sql: str) -> str:
    sql = str(sql)
    if not sql.strip():
        raise ValueError("the SQL query is empty")
    if len(sql) > MAX_SQL_CHARS:
        raise ValueError(f"the SQL query has {len(sql)} characters; at most {MAX_SQL_CHARS}")
    return sql


def first_row(uri: str, sql: str, parameters: Mapping[str, Any] | None = None) -> list[Any] | None:
    """The first row ``sql`` returns on the database of ``uri`` (its values as JSON values),
    or None when it returns none. Blocking: a triggerer calls it on a thread."""
    import sqlalchemy as sa  # heavy: only where a SQL check runs

    url = sqlalchemy_url(uri)
    connect_args: dict[str, Any] = {}
    if url.startswith("sqlite"):
        connect_args["timeout"] = CONNECT_TIMEOUT
    elif url.startswith("postgresql"):
        connect_args["connect_timeout"] = CONNECT_TIMEOUT
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args=connect_args)
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.text(check_sql(sql)), dict(parameters or {})).first()
    finally:
        engine.dispose()
    return None if row is None else json_row(tuple(row))


def json_row(row: Sequence[Any]) -> list[Any]:
    """A row as JSON values (dates, decimals... as text), cut to MAX_ROW_CHARS."""
    values = json.loads(json.dumps(list(row), default=str))
    while values and len(json.dumps(values)) > MAX_ROW_CHARS:
        values = values[:-1]  # drop trailing columns rather than send a row too large
    return values


def row_done(row: list[Any] | None, *, first_cell_truthy: bool) -> bool:
    """Airflow's SqlSensor: done when a row came and (by default) its first cell is truthy
    (``"0"``, ``""``, ``0``, NULL are not)."""
    if row is None:
        return False
    if not first_cell_truthy:
        return True
    first = row[0] if row else None
    if isinstance(first, str):
        return first.strip() not in ("", "0")
    return bool(first)
