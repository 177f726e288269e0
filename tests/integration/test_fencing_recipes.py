"""The two recipes of docs/fencing-side-effects.md against real systems: a table on SQLite and
PostgreSQL (``raftsched.fencing.upsert_fenced``) and files (``write_file_fenced``), each with
writers racing in processes of their own. The live test (a stale attempt refused while its
retry's write stands) is tests/integration/test_fenced_side_effects.py."""

from __future__ import annotations

import multiprocessing
import random
from pathlib import Path

import pytest
import sqlalchemy as sa

from raftsched import fencing
from raftsched.errors import NoFencingToken

TABLE = "fenced_result"
CREATE = f"CREATE TABLE {TABLE} (key TEXT PRIMARY KEY, value TEXT, fencing_token BIGINT NOT NULL)"


@pytest.fixture
def engine(db_url: str, tmp_path: Path) -> sa.Engine:
    if db_url.startswith("sqlite"):
        db_url = f"sqlite:///{tmp_path / 'sink.db'}"
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(CREATE)
    yield engine
    engine.dispose()


def _row(engine: sa.Engine, key: str) -> tuple[str, int] | None:
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(f"SELECT value, fencing_token FROM {TABLE} WHERE key = :k"), {"k": key}
        ).one_or_none()
    return None if row is None else (row[0], row[1])


def test_an_older_token_is_refused_and_a_newer_one_applied(engine: sa.Engine) -> None:
    def write(value: str, token: int) -> bool:
        with engine.begin() as conn:
            return fencing.upsert_fenced(conn, TABLE, "2024-01-01", value, token)

    assert write("first attempt", 17)
    assert write("retry", 42)
    assert not write("first attempt, woken late", 17)
    assert not write("the retry again", 42)  # equal: the same attempt twice is not new
    assert _row(engine, "2024-01-01") == ("retry", 42)
    assert write("a later run of the task", 43)
    assert _row(engine, "2024-01-01") == ("a later run of the task", 43)


def _race_sql(url: str, tokens: list[int]) -> None:
    engine = sa.create_engine(url)
    for token in tokens:
        with engine.begin() as conn:
            fencing.upsert_fenced(conn, TABLE, "k", f"by {token}", token)
    engine.dispose()


def test_racing_writers_leave_the_newest_token(engine: sa.Engine) -> None:
    tokens = list(range(1, 201))
    random.Random(7).shuffle(tokens)
    url = engine.url.render_as_string(hide_password=False)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_race_sql, args=(url, tokens[i::4])) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert _row(engine, "k") == ("by 200", 200)


def test_a_table_name_is_never_sql() -> None:
    with pytest.raises(ValueError, match="not a plain table name"):
        fencing.upsert_sql("t; DROP TABLE dag_run")


def test_a_file_keeps_the_newest_writer(tmp_path: Path) -> None:
    target = tmp_path / "report.csv"
    assert fencing.write_file_fenced(target, b"a,b\n1,2\n", 17)
    assert fencing.write_file_fenced(target, b"a,b\n3,4\n", 42)
    assert not fencing.write_file_fenced(target, b"stale\n", 17)
    assert not fencing.write_file_fenced(target, b"same\n", 42)
    assert fencing.read_file_token(target) == 42
    assert fencing.read_file_data(target) == b"a,b\n3,4\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def _race_file(path: str, tokens: list[int]) -> None:
    for token in tokens:
        fencing.write_file_fenced(Path(path), f"by {token}\n".encode(), token)


def test_racing_file_writers_leave_the_newest_token(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    tokens = list(range(1, 401))
    random.Random(11).shuffle(tokens)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_race_file, args=(str(target), tokens[i::4])) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert fencing.read_file_token(target) == 400
    assert fencing.read_file_data(target) == b"by 400\n"


def test_the_token_comes_from_the_attempts_environment() -> None:
    assert fencing.current_token({"RAFTSCHED_FENCING_TOKEN": "1234"}) == 1234
    for bad in ({}, {"RAFTSCHED_FENCING_TOKEN": "0"}, {"RAFTSCHED_FENCING_TOKEN": "x"}):
        with pytest.raises(NoFencingToken):
            fencing.current_token(bad)
