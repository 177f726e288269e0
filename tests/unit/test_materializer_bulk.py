"""PostgreSQL's bulk path of the materializer (store/bulk.py, issue #11): one statement per
table writes the very rows, JSON text included, that the per-row executemany wrote, and
values that are not for it (another Python type, NUL) go the per-row way as before."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from raftsched.core.model import OutboxEntry, OutboxKind, utc_iso
from raftsched.store import bulk
from raftsched.store import tables as t
from raftsched.store.engine import create_engine_for
from raftsched.store.materializer import Materializer
from raftsched.store.migrate import init_db

pytestmark = pytest.mark.postgres

T0 = datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:
    engine = create_engine_for(postgres_url)
    init_db(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def _entries() -> list[OutboxEntry]:
    data: list[tuple[OutboxKind, dict[str, Any]]] = [
        (
            OutboxKind.DAG,
            {
                "dag_id": "etl",
                "fileloc": "/dags/etl.py",
                "spec": {"dag_id": "etl", "tags": ["é", "b"], "n": 1.5, "x": None},
                "spec_hash": "h" * 64,
                "paused": False,
                "active": True,
                "updated_at": utc_iso(T0),
            },
        )
    ]
    for day in range(40):
        logical = T0 + timedelta(days=day)
        run_id = f"scheduled__{utc_iso(logical)}"
        conf = {"day": day, "nested": {"k": [1, 2.5, None, "é\n"]}, "b": day % 2 == 0}
        data.append(
            (
                OutboxKind.DAG_RUN,
                {
                    "dag_id": "etl",
                    "run_id": run_id,
                    "logical_date": utc_iso(logical),
                    "data_interval_start": utc_iso(logical - timedelta(days=1)),
                    "data_interval_end": utc_iso(logical),
                    "run_type": "scheduled",
                    "state": "running" if day % 3 else "success",
                    "conf": conf,
                    "created_at": utc_iso(logical),
                    "start_date": utc_iso(logical) if day % 2 else None,
                    "end_date": None,
                },
            )
        )
        data.append(
            (
                OutboxKind.TASK_INSTANCE,
                {
                    "dag_id": "etl",
                    "run_id": run_id,
                    "task_id": "extract",
                    "try_number": 1,
                    "state": "success",
                    "worker_id": "w1" if day % 2 else None,
                    "lease_token": (1 << 40) + day,
                    "queued_at": utc_iso(logical),
                    "start_date": utc_iso(logical + timedelta(seconds=1)),
                    "end_date": utc_iso(logical + timedelta(seconds=2)),
                    "exit_code": 0,
                    "message": "ok 'quoted' \"twice\" \\ {braces}",
                    "result_json": '{"v": 1}' if day % 4 == 0 else None,
                },
            )
        )
        data.append(
            (
                OutboxKind.TASK_LOG,
                {
                    "dag_id": "etl",
                    "run_id": run_id,
                    "task_id": "extract",
                    "try_number": 1,
                    "chunk_seq": 0,
                    "stream": "stdout",
                    "text": f'line {day}\n,{{}}"',
                    "created_at": utc_iso(logical),
                },
            )
        )
    return [OutboxEntry(seq, kind, d) for seq, (kind, d) in enumerate(data, start=1)]


def _dump(engine: sa.Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the written tables, JSON columns as the text PostgreSQL stores."""
    out = {}
    with engine.connect() as conn:
        for table in (t.dags, t.dag_run, t.task_instance, t.task_log):
            names = [
                f"{c.name}::text" if isinstance(c.type, sa.JSON) else c.name for c in table.columns
            ]
            keys = ", ".join(c.name for c in table.primary_key.columns)
            query = f"SELECT {', '.join(names)} FROM {table.name} ORDER BY {keys}"
            out[table.name] = [tuple(r) for r in conn.exec_driver_sql(query)]
    return out


def _clear(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql("TRUNCATE dags, dag_run, task_instance, task_log")
        conn.execute(sa.update(t.materialize_watermark).values(seq=0))


def test_the_bulk_path_writes_what_the_per_row_path_wrote(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = _entries()
    statements: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    assert Materializer(engine).write(entries) == len(entries)
    bulk_rows = _dump(engine)
    assert sum("unnest(" in s for s in statements) == 4  # one statement per table
    assert len(bulk_rows["dag_run"]) == len(bulk_rows["task_log"]) == 40

    _clear(engine)
    monkeypatch.setattr(bulk, "write", lambda *a, **k: False)  # the per-row path
    assert Materializer(engine).write(entries) == len(entries)
    assert _dump(engine) == bulk_rows


def test_values_not_for_the_bulk_path_are_written_per_row_as_before(engine: sa.Engine) -> None:
    entries = _entries()[:3]  # the DAG, a run and its task instance
    odd = dict(entries[2].data, worker_id=7)  # not a str: bound per row, as before
    entries[2] = OutboxEntry(entries[2].seq, entries[2].kind, odd)
    assert bulk.columns_of(t.task_instance, [{**odd, "queued_at": T0}]) is None
    assert Materializer(engine).write(entries) == 3
    with engine.connect() as conn:
        worker = conn.exec_driver_sql("SELECT worker_id FROM task_instance").scalar_one()
    assert worker == "7"


def test_a_value_too_long_is_refused_and_quarantined_alone(engine: sa.Engine) -> None:
    entries = _entries()[:5]  # DAG, run 0, its TI and log, run 1
    long = dict(entries[4].data, run_id="r" * 300)  # dag_run.run_id is varchar(250)
    entries[4] = OutboxEntry(5, entries[4].kind, long)
    m = Materializer(engine)
    assert m.write(entries) == 5
    [refused] = m.quarantined()
    assert refused.seq == 5 and "too long" in refused.error
    assert len(_dump(engine)["dag_run"]) == 1
