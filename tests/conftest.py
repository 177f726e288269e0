"""Shared fixtures: a fresh metadata database per test, on SQLite and on PostgreSQL.

``db_url``      a URL to a new, empty database (no schema). Parametrized: every test that
                uses it runs twice, ``[sqlite]`` and ``[postgres]``.
``db_engine``   an engine on ``db_url`` with the schema migrated to head; disposed after.
``sqlite_url`` / ``postgres_url``   one backend only, when a test needs just that one.

PostgreSQL: ``RAFTSCHED_TEST_PG_URL`` names a server and a database the tests may connect to
as an admin (e.g. ``postgresql+psycopg://postgres@127.0.0.1:5432/test``). Each test gets its
own ``CREATE DATABASE raftsched_t_<random>``, dropped afterwards (WITH (FORCE), so a process
the test left behind cannot keep it alive). Without the variable the PostgreSQL tests skip;
with it set and the server unreachable they FAIL, because CI must never skip them silently.

Processes a test starts (scheduler nodes, ...) can be given ``db_url`` as it is: it carries
no password unless RAFTSCHED_TEST_PG_URL does.
"""

from __future__ import annotations

import os

# In-process scheduler nodes (tests/unit) fork their snapshot writer, as a node process does,
# and gRPC's fork handlers make such children abort. gRPC reads this when it first loads,
# which may be while any test module is collected: so here, in the conftest pytest loads
# first. `raftsched scheduler` sets the same before gRPC loads (cli/cluster_cmd.py).
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

PG_ENV = "RAFTSCHED_TEST_PG_URL"


def pg_admin_url() -> str | None:
    return os.environ.get(PG_ENV) or None


def _create_pg_database() -> Iterator[str]:
    import sqlalchemy as sa

    admin_url = pg_admin_url()
    if admin_url is None:
        pytest.skip(f"{PG_ENV} is not set (CI sets it; these tests then must run)")
    name = f"raftsched_t_{uuid.uuid4().hex[:16]}"
    admin = sa.create_engine(
        admin_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}
    )
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as err:
        admin.dispose()
        pytest.fail(f"{PG_ENV} is set but PostgreSQL is unreachable: {err.orig}", pytrace=False)
    try:
        url = sa.make_url(admin_url).set(database=name)
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file that does not exist yet, in the test's own temporary directory."""
    return f"sqlite:///{tmp_path / 'metadata' / 'raftsched.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A new, empty PostgreSQL database of its own; skips locally without RAFTSCHED_TEST_PG_URL."""
    yield from _create_pg_database()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A new, empty metadata database, once per backend (test ids end in [sqlite]/[postgres])."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def db_engine(db_url: str) -> Iterator[Engine]:
    """A ``sqlalchemy.Engine`` on ``db_url``, schema migrated to head."""
    from raftsched.store.engine import create_engine_for
    from raftsched.store.migrate import init_db

    engine = create_engine_for(db_url)
    init_db(engine)
    try:
        yield engine
    finally:
        engine.dispose()
