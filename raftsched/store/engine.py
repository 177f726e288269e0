"""Engines for the metadata database, write transactions, and the one place DB errors become
raftsched errors.

SQLite (the default, one machine) runs in WAL mode with a busy timeout, foreign keys on and
``synchronous=NORMAL``. Python's sqlite3 module is told to keep out of transaction handling
so that SQLAlchemy emits ``BEGIN`` itself: transactional DDL works (migrations are atomic)
and a write transaction can take the write lock up front with ``BEGIN IMMEDIATE``
(:func:`write_transaction`). PostgreSQL goes through psycopg 3 with a connect timeout and
pre-ping, so a restarted server costs one failed ping, not a failed write.

Engines are thread-safe; create one per process and share it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, Connection, Engine, make_url

from raftsched.errors import ConfigError, MigrationRequired, StoreUnavailable

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_S = 10.0
_SQLITE_BEGIN = "raftsched_sqlite_begin"  # connection execution option: "BEGIN" statement


def create_engine_for(
    url: str | URL, *, connect_timeout: float = 5.0, pool_size: int = 5
) -> Engine:
    """An engine for ``url`` (``sqlite:///path`` or ``postgresql+psycopg://...``).

    Connects lazily: an unreachable database shows up on first use as
    :class:`~raftsched.errors.StoreUnavailable` (inside :func:`translate_errors`).
    For a SQLite file, the parent directory is created if it can be.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, pool_size=pool_size)
    if backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return sa.create_engine(
            parsed,
            connect_args={"connect_timeout": max(1, math.ceil(connect_timeout))},
            pool_size=pool_size,
            pool_pre_ping=True,
        )
    raise ConfigError(
        f"unsupported database URL {safe_url(parsed)}: use sqlite:///PATH or"
        " postgresql+psycopg://USER@HOST:PORT/DB",
        key="url",
        value=safe_url(parsed),
    )


def _sqlite_engine(url: URL, *, pool_size: int) -> Engine:
    database = url.database or ""
    in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
    kwargs: dict[str, Any] = {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}
    if not in_memory:
        kwargs["pool_size"] = pool_size
        try:
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # reported as StoreUnavailable when the first connect fails
            log.debug("cannot create the directory of %s: %s", database, err)
    engine = sa.create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN, see _on_begin
        cursor = dbapi_connection.cursor()
        try:
            if not in_memory:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get(_SQLITE_BEGIN, "BEGIN"))

    return engine


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that takes the database's write lock at its start, committed on success.

    SQLite: ``BEGIN IMMEDIATE`` (writers queue on the busy timeout instead of failing on a
    stale read snapshot). PostgreSQL: a plain transaction; lock rows with ``FOR UPDATE``.
    DB errors are translated as by :func:`translate_errors`.
    """
    with translate_errors(engine), engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            conn = conn.execution_options(**{_SQLITE_BEGIN: "BEGIN IMMEDIATE"})
        with conn.begin():
            yield conn


@contextmanager
def translate_errors(engine: Engine) -> Iterator[None]:
    """Turn "cannot reach / cannot open the database" into :class:`StoreUnavailable` (the
    caller backs off and retries) and a missing table into :class:`MigrationRequired`."""
    try:
        yield
    except (exc.OperationalError, exc.InterfaceError) as err:
        reason = _reason(err)
        if "no such table" in reason:  # SQLite
            raise MigrationRequired(
                f"metadata database {safe_url(engine.url)} has no schema ({reason}):"
                " run raftsched db migrate"
            ) from err
        raise StoreUnavailable(
            f"metadata database {safe_url(engine.url)} unavailable: {reason}",
            url=safe_url(engine.url),
        ) from err
    except exc.ProgrammingError as err:
        reason = _reason(err)
        if isinstance(err.orig, _undefined_table_errors()):  # PostgreSQL
            raise MigrationRequired(
                f"metadata database {safe_url(engine.url)} has no schema ({reason}):"
                " run raftsched db migrate"
            ) from err
        raise
    except exc.DBAPIError as err:
        if err.connection_invalidated:
            raise StoreUnavailable(
                f"metadata database {safe_url(engine.url)} unavailable: {_reason(err)}",
                url=safe_url(engine.url),
            ) from err
        raise


def _undefined_table_errors() -> tuple[type[BaseException], ...]:
    try:
        from psycopg import errors as pg_errors
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return ()
    return (pg_errors.UndefinedTable,)


def safe_url(url: str | URL) -> str:
    """The URL as text with any password masked: safe for logs and error messages."""
    return make_url(url).render_as_string(hide_password=True)


def _reason(err: exc.DBAPIError) -> str:
    text = str(err.orig) if err.orig is not None else str(err)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return "; ".join(lines[:2]) if lines else type(err.orig).__name__
