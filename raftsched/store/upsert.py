"""Dialect-specific upserts (``INSERT ... ON CONFLICT``) for SQLite and PostgreSQL.

Both take many rows in one call (an executemany). Rows must not repeat a primary key within
one call: PostgreSQL refuses to touch a row twice in one statement, so callers keep the last
row per key first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection


def _insert(conn: Connection, table: sa.Table) -> Any:
    name = conn.dialect.name
    if name == "postgresql":
        return postgresql.insert(table)
    if name == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"raftsched supports SQLite and PostgreSQL, not {name}")


def upsert(conn: Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows``; a row whose primary key exists replaces every other column."""
    if not rows:
        return
    keys = [c.name for c in table.primary_key.columns]
    stmt = _insert(conn, table)
    stmt = stmt.on_conflict_do_update(
        index_elements=keys,
        set_={c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys},
    )
    conn.execute(stmt, list(rows))


def insert_ignore(conn: Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``rows``, skipping any whose primary key exists already."""
    if not rows:
        return
    stmt = _insert(conn, table).on_conflict_do_nothing(
        index_elements=[c.name for c in table.primary_key.columns]
    )
    conn.execute(stmt, list(rows))
