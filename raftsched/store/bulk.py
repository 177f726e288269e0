"""Bulk writes of many rows in one PostgreSQL statement: ``INSERT ... SELECT ... FROM
unnest(<one array per column>) ON CONFLICT ...`` (one statement, not one
parameter set per row).

The materializer writes every run and task instance the scheduler creates. As an
executemany (``store.upsert``), each row cost SQLAlchemy's parameter processing and
psycopg's per-row encoding and protocol messages: ~70 us of the leader's CPU per run at
20,000 entries a second. Here each column travels as one array (psycopg encodes a list in one
call), so a table's rows are one statement and one round trip.

Same rows and the same refusals as ``store.upsert``:

- Strings are sent as ``text[]`` and integers as ``bigint[]``; the INSERT's assignment casts
  then refuse a value too long for a ``varchar(n)`` or out of range for ``integer``, as the
  per-row statement did (an explicit cast to ``varchar(n)[]`` would truncate instead).
- JSON columns are sent as the text ``json.dumps`` gives (what SQLAlchemy's JSON type sends)
  and cast in the SELECT.
- A column holding a value of another Python type than its column expects (never in rows the
  core writes; a hand-made entry could), or text with NUL (PostgreSQL refuses it; psycopg's
  per-row path says so in words, the server only names the byte), is not for this path:
  :func:`columns_of` answers None and the caller falls back to ``store.upsert``, whose bind
  processing converts or refuses it as before.

Rows must not repeat a primary key (callers keep the last row per key, as for ``upsert``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

_INT8 = (-(1 << 63), (1 << 63) - 1)


def _kind(column: sa.Column[Any]) -> str:
    """The array type a column travels as: text, timestamptz, boolean, bigint or json."""
    kind = column.type
    impl = getattr(kind, "impl", kind)  # a TypeDecorator (UTCDateTime) by what it stores
    if isinstance(impl, sa.JSON):
        return "json"
    if isinstance(impl, sa.DateTime):
        return "timestamptz"
    if isinstance(impl, sa.Boolean):
        return "boolean"
    if isinstance(impl, sa.Integer):  # Integer and BigInteger
        return "bigint"
    if isinstance(impl, sa.String):  # String(n) and Text
        return "text"
    raise NotImplementedError(f"no bulk path for column {column.name} of type {kind!r}")


def _fits(kind: str, values: list[Any]) -> bool:
    """Every value is of the Python type the column's array expects (None included)."""
    if kind == "text":  # NUL: psycopg's per-row path refuses it with a clearer message
        return all(v is None or (type(v) is str and "\x00" not in v) for v in values)
    if kind == "timestamptz":
        return all(v is None or (type(v) is datetime and v.tzinfo is not None) for v in values)
    if kind == "boolean":
        return all(type(v) is bool or v is None for v in values)
    if kind == "bigint":
        low, high = _INT8
        return all(v is None or (type(v) is int and low <= v <= high) for v in values)
    return True  # json: any value json.dumps takes


def columns_of(table: sa.Table, rows: Sequence[dict[str, Any]]) -> list[list[Any]] | None:
    """The rows as one list per column of ``table`` (in column order), JSON values as text;
    None when a value is not for the bulk path (see the module doc)."""
    out = []
    for column in table.columns:
        name = column.name
        values = [row[name] for row in rows]
        kind = _kind(column)
        if not _fits(kind, values):
            return None
        if kind == "json":
            try:
                values = [json.dumps(v) for v in values]
            except (TypeError, ValueError):
                return None  # the per-row path refuses it the way it did
        out.append(values)
    return out


_SQL: dict[tuple[str, bool], str] = {}


def _statement(table: sa.Table, update: bool) -> str:
    sql = _SQL.get((table.name, update))
    if sql is not None:
        return sql
    names = [c.name for c in table.columns]
    keys = [c.name for c in table.primary_key.columns]
    kinds = [_kind(c) for c in table.columns]
    arrays = ", ".join(f"%b::{'text' if k == 'json' else k}[]" for k in kinds)
    picks = ", ".join(
        f"u.{n}::json" if k == "json" else f"u.{n}" for n, k in zip(names, kinds, strict=True)
    )
    if update:
        sets = ", ".join(f"{n} = excluded.{n}" for n in names if n not in keys)
        conflict = f"DO UPDATE SET {sets}"
    else:
        conflict = "DO NOTHING"
    sql = (
        f"INSERT INTO {table.name} ({', '.join(names)})"
        f" SELECT {picks} FROM unnest({arrays}) AS u({', '.join(names)})"
        f" ON CONFLICT ({', '.join(keys)}) {conflict}"
    )
    _SQL[(table.name, update)] = sql
    return sql


def write(
    conn: Connection, table: sa.Table, rows: Sequence[dict[str, Any]], *, update: bool
) -> bool:
    """Insert ``rows`` in one statement (``update``: a row whose key exists replaces every
    other column; else it is skipped). False, writing nothing, when the rows are not for the
    bulk path: use ``store.upsert``."""
    if not rows:
        return True
    columns = columns_of(table, rows)
    if columns is None:
        return False
    conn.exec_driver_sql(_statement(table, update), tuple(columns))
    return True
