"""Schema migrations and `raftsched db migrate|check`, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from raftsched.cli.main import main
from raftsched.errors import ConfigError, MigrationRequired, StoreUnavailable
from raftsched.store import tables as t
from raftsched.store.engine import create_engine_for, safe_url
from raftsched.store.materializer import Materializer
from raftsched.store.migrate import head_revision, init_db, require_head, schema_status


def test_migrate_empty_database_to_head(db_url: str) -> None:
    engine = create_engine_for(db_url)
    try:
        assert schema_status(engine).current is None
        with pytest.raises(MigrationRequired, match="run raftsched db migrate"):
            require_head(engine)

        before = init_db(engine)
        assert before.current is None and not before.at_head
        assert require_head(engine).current == head_revision()
        assert init_db(engine).at_head  # a second run is a no-op
        assert Materializer(engine).watermark() == 0
    finally:
        engine.dispose()


def test_migrations_at_head_match_the_table_definitions(db_engine: sa.Engine) -> None:
    with db_engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, t.metadata) == []


def test_aware_datetimes_round_trip_as_utc(db_engine: sa.Engine) -> None:
    plus_two = timezone(timedelta(hours=2))
    written = datetime(2024, 3, 1, 12, 30, 15, 123456, tzinfo=plus_two)
    with db_engine.begin() as conn:
        conn.execute(
            sa.insert(t.users).values(
                username="u", password_hash="x", role="viewer", created_at=written
            )
        )
    with db_engine.connect() as conn:
        read = conn.execute(sa.select(t.users.c.created_at)).scalar_one()
    assert read == written
    assert read.tzinfo == UTC


def test_naive_datetimes_are_refused(db_engine: sa.Engine) -> None:
    with pytest.raises(sa.exc.StatementError, match="naive datetime"), db_engine.begin() as conn:
        conn.execute(
            sa.insert(t.users).values(
                username="u", password_hash="x", role="viewer", created_at=datetime(2024, 1, 1)
            )
        )


def test_missing_schema_is_migration_required(db_url: str) -> None:
    engine = create_engine_for(db_url)
    try:
        with pytest.raises(MigrationRequired, match="raftsched db migrate"):
            Materializer(engine).watermark()
    finally:
        engine.dispose()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the socket is


def test_unreachable_postgres_is_store_unavailable() -> None:
    url = f"postgresql+psycopg://raftsched:secret@127.0.0.1:{_closed_port()}/nowhere"
    engine = create_engine_for(url, connect_timeout=1)
    with pytest.raises(StoreUnavailable, match="unavailable") as caught:
        Materializer(engine).watermark()
    assert "secret" not in str(caught.value)
    assert "127.0.0.1" in str(caught.value)


def test_sqlite_in_unwritable_place_is_store_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    engine = create_engine_for(f"sqlite:///{blocker / 'sub' / 'raftsched.db'}")
    with pytest.raises(StoreUnavailable, match="unable to open database file"):
        init_db(engine)
    with pytest.raises(StoreUnavailable):
        Materializer(engine).write([])


def test_safe_url_hides_the_password() -> None:
    assert safe_url("postgresql+psycopg://u:pw@h/db") == "postgresql+psycopg://u:***@h/db"


# -- CLI ------------------------------------------------------------------------------------


def test_cli_check_migrate_check(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    head = head_revision()
    assert main(["db", "check", "--url", db_url]) == 1
    err = capsys.readouterr().err
    assert f"database at revision <empty>, head is {head}: run raftsched db migrate" in err

    assert main(["db", "migrate", "--url", db_url]) == 0
    assert f"migrated from <empty> to {head}" in capsys.readouterr().out

    assert main(["db", "migrate", "--url", db_url, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["to"] == head

    assert main(["db", "check", "--url", db_url]) == 0
    assert f"at head revision {head}" in capsys.readouterr().out


def test_cli_check_on_a_newer_schema_says_upgrade_raftsched(
    db_engine: sa.Engine, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with db_engine.begin() as conn:  # a newer release migrated this database
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0000'"))
    assert main(["db", "check", "--url", db_url]) == 1
    assert "database at revision 0000, which this raftsched release does not know" in (
        capsys.readouterr().err
    )


def test_cli_check_unreachable_database(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/test"
    assert main(["db", "check", "--url", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith("raftsched: error: metadata database postgresql+psycopg://")
    assert "unavailable" in err
    assert "Traceback" not in err


def test_cli_db_without_subcommand_is_usage() -> None:
    assert main(["db"]) == 2


def test_cli_reads_the_url_from_config(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RAFTSCHED_CONFIG", raising=False)
    monkeypatch.setenv("RAFTSCHED_HOME", str(tmp_path))
    config = tmp_path / "raftsched.cfg"
    config.write_text(f"[database]\nurl = {db_url}\nconnect_timeout = 2\n")
    assert main(["--config", str(config), "db", "migrate"]) == 0
    assert f"migrated from <empty> to {head_revision()}" in capsys.readouterr().out
    monkeypatch.setenv("RAFTSCHED__DATABASE__URL", db_url)
    assert main(["db", "check"]) == 0


def test_unsupported_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unsupported database URL mysql://u:\\*\\*\\*@h/db"):
        create_engine_for("mysql://u:pw@h/db")
