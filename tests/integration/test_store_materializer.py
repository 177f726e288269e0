"""Contract of the outbox materializer (docs/architecture.md §5), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from raftsched.core.model import (
    DagSpec,
    OutboxEntry,
    OutboxKind,
    Schedule,
    ScheduleKind,
    TaskSpec,
    utc_iso,
)
from raftsched.errors import OutboxGap
from raftsched.store import materializer as materializer_module
from raftsched.store import tables as t
from raftsched.store.abc import OutboxSink
from raftsched.store.engine import create_engine_for
from raftsched.store.materializer import Materializer
from raftsched.store.memory import MemoryMaterializer
from raftsched.store.migrate import init_db

T0 = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass
class Outbox:
    """Builds outbox entries with consecutive seqs, laid out as OutboxKind documents."""

    entries: list[OutboxEntry] = field(default_factory=list)

    def add(self, kind: OutboxKind, data: dict[str, Any]) -> OutboxEntry:
        entry = OutboxEntry(seq=len(self.entries) + 1, kind=kind, data=data)
        self.entries.append(entry)
        return entry

    def dag(self, dag_id: str = "etl", *, paused: bool = False) -> OutboxEntry:
        spec = DagSpec(
            dag_id=dag_id,
            fileloc=f"/dags/{dag_id}.py",
            schedule=Schedule(ScheduleKind.CRON, cron="0 0 * * *", display="@daily"),
            start_date=T0,
            tasks=(TaskSpec(task_id="extract", kind="bash", command="echo hi"),),
        )
        spec = DagSpec.from_dict({**spec.to_dict(), "spec_hash": spec.compute_hash()})
        return self.add(
            OutboxKind.DAG,
            {
                "dag_id": dag_id,
                "fileloc": spec.fileloc,
                "spec": spec.to_dict(),
                "spec_hash": spec.spec_hash,
                "paused": paused,
                "active": True,
                "updated_at": utc_iso(T0),
            },
        )

    def run(self, day: int, *, dag_id: str = "etl", state: str = "queued", **extra: Any) -> None:
        logical = T0 + timedelta(days=day)
        self.add(
            OutboxKind.DAG_RUN,
            {
                "dag_id": dag_id,
                "run_id": extra.pop("run_id", f"scheduled__{logical.isoformat()}"),
                "logical_date": utc_iso(logical),
                "data_interval_start": utc_iso(logical),
                "data_interval_end": utc_iso(logical + timedelta(days=1)),
                "run_type": "scheduled",
                "state": state,
                "conf": {"day": day},
                "created_at": utc_iso(logical),
                "start_date": None,
                "end_date": None,
                **extra,
            },
        )

    def task(self, run_id: str, try_number: int, state: str, **extra: Any) -> None:
        self.add(
            OutboxKind.TASK_INSTANCE,
            {
                "dag_id": "etl",
                "run_id": run_id,
                "task_id": "extract",
                "try_number": try_number,
                "state": state,
                "worker_id": "w1",
                "lease_token": 40 + try_number,
                "queued_at": utc_iso(T0),
                "start_date": utc_iso(T0 + timedelta(seconds=1)),
                "end_date": None,
                "exit_code": None,
                "message": "",
                **extra,
            },
        )

    def log(self, run_id: str, chunk_seq: int, text: str, stream: str = "stdout") -> None:
        self.add(
            OutboxKind.TASK_LOG,
            {
                "dag_id": "etl",
                "run_id": run_id,
                "task_id": "extract",
                "try_number": 1,
                "chunk_seq": chunk_seq,
                "stream": stream,
                "text": text,
                "created_at": utc_iso(T0),
            },
        )

    def errors(self, *filelocs: str) -> None:
        self.add(
            OutboxKind.IMPORT_ERRORS,
            {
                "errors": [
                    {"fileloc": f, "message": f"bad {f}", "traceback": "tb"} for f in filelocs
                ],
                "updated_at": utc_iso(T0),
            },
        )


RUN1 = f"scheduled__{T0.isoformat()}"


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sink(request: pytest.FixtureRequest) -> OutboxSink:
    """Every OutboxSink implementation, each on a fresh store: one contract for all."""
    if request.param == "memory":
        return MemoryMaterializer()
    engine = create_engine_for(request.getfixturevalue(f"{request.param}_url"))
    request.addfinalizer(engine.dispose)
    init_db(engine)
    return Materializer(engine)


def rows(sink: OutboxSink | sa.Engine, table: sa.Table, *order_by: str) -> list[dict[str, Any]]:
    """What the store holds in ``table``, ordered by the ``order_by`` columns."""
    if isinstance(sink, MemoryMaterializer):
        return sorted(sink.rows(table.name), key=lambda r: tuple(r[c] for c in order_by))
    engine = sink.engine if isinstance(sink, Materializer) else sink
    with engine.connect() as conn:
        query = sa.select(table).order_by(*(table.c[c] for c in order_by))
        return [dict(r) for r in conn.execute(query).mappings()]


def overwrite_run_states(sink: OutboxSink, state: str) -> None:
    """Change the store behind the sink's back (to see whether a rewrite touches it)."""
    if isinstance(sink, MemoryMaterializer):
        for row in sink._tables[t.dag_run.name].values():  # test-only peek inside
            row["state"] = state
        return
    assert isinstance(sink, Materializer)
    with sink.engine.begin() as conn:
        conn.execute(sa.update(t.dag_run).values(state=state))


def test_fresh_database_has_watermark_zero(sink: OutboxSink) -> None:
    assert sink.watermark() == 0
    assert sink.write([]) == 0


def test_writes_every_kind(sink: OutboxSink) -> None:
    box = Outbox()
    box.dag()
    box.run(0)
    box.task(RUN1, 1, "running")
    box.log(RUN1, 0, "hello\n")
    box.log(RUN1, 1, "oops\n", stream="stderr")
    box.errors("/dags/a.py", "/dags/b.py")

    assert sink.write(box.entries) == 6
    assert sink.watermark() == 6

    [dag] = rows(sink, t.dags, "dag_id")
    assert dag["spec"]["tasks"][0]["task_id"] == "extract"
    assert dag["paused"] is False and dag["active"] is True
    assert dag["updated_at"] == T0
    [run] = rows(sink, t.dag_run, "run_id")
    assert run["run_id"] == RUN1 and run["logical_date"] == T0 and run["conf"] == {"day": 0}
    assert run["data_interval_end"] == T0 + timedelta(days=1) and run["start_date"] is None
    [ti] = rows(sink, t.task_instance, "try_number")
    assert (ti["state"], ti["lease_token"], ti["worker_id"]) == ("running", 41, "w1")
    logs = rows(sink, t.task_log, "chunk_seq")
    assert [(r["chunk_seq"], r["stream"], r["text"]) for r in logs] == [
        (0, "stdout", "hello\n"),
        (1, "stderr", "oops\n"),
    ]
    assert [r["fileloc"] for r in rows(sink, t.import_error, "fileloc")] == [
        "/dags/a.py",
        "/dags/b.py",
    ]


def test_import_errors_replace_the_table(sink: OutboxSink) -> None:
    box = Outbox()
    box.errors("/dags/a.py", "/dags/b.py")
    sink.write(box.entries)
    box.errors("/dags/c.py")
    sink.write(box.entries)
    assert [r["fileloc"] for r in rows(sink, t.import_error, "fileloc")] == ["/dags/c.py"]
    box.errors()
    sink.write(box.entries)
    assert rows(sink, t.import_error, "fileloc") == []


def test_rewriting_the_same_batch_writes_nothing_twice(sink: OutboxSink) -> None:
    box = Outbox()
    box.dag()
    box.run(0)
    box.log(RUN1, 0, "once\n")
    assert sink.write(box.entries) == 3
    # Someone edits the DB behind our back: a rewrite must not touch it (nothing re-applied).
    overwrite_run_states(sink, "marker")
    assert sink.write(box.entries) == 3
    assert sink.write(list(reversed(box.entries))) == 3
    assert rows(sink, t.dag_run, "run_id")[0]["state"] == "marker"
    assert len(rows(sink, t.task_log, "chunk_seq")) == 1


def test_entries_at_or_below_watermark_are_skipped(sink: OutboxSink) -> None:
    box = Outbox()
    box.dag()
    box.run(0, state="queued")
    sink.write(box.entries)
    box.run(0, state="running")
    box.run(1)
    # The batch starts below the watermark (a new leader resending its whole outbox).
    assert sink.write(box.entries) == 4
    assert [r["state"] for r in rows(sink, t.dag_run, "logical_date")] == [
        "running",
        "queued",
    ]


def test_gap_after_watermark_is_refused_and_writes_nothing(sink: OutboxSink) -> None:
    box = Outbox()
    box.dag()
    for day in range(5):
        box.run(day)
    sink.write(box.entries[:2])

    with pytest.raises(OutboxGap, match="watermark 2") as caught:
        sink.write(box.entries[3:])  # seq 3 is missing
    assert caught.value.watermark == 2 and caught.value.seqs == (4, 5, 6)
    with pytest.raises(OutboxGap):
        sink.write([box.entries[2], box.entries[4]])  # 3, then 5: a hole inside the batch

    assert sink.watermark() == 2
    assert len(rows(sink, t.dag_run, "run_id")) == 1
    assert sink.write(box.entries[2:]) == 6


def test_later_upsert_of_the_same_key_in_one_batch_wins(sink: OutboxSink) -> None:
    box = Outbox()
    box.dag(paused=False)
    box.run(0, state="queued")
    box.task(RUN1, 1, "queued")
    box.dag(paused=True)
    box.run(0, state="running", start_date=utc_iso(T0))
    box.task(RUN1, 1, "failed", exit_code=3)
    box.task(RUN1, 2, "running")
    box.run(0, state="success", start_date=utc_iso(T0), end_date=utc_iso(T0))
    box.errors("/dags/a.py")
    box.errors("/dags/b.py")
    assert sink.write(box.entries) == 10

    assert rows(sink, t.dags, "dag_id")[0]["paused"] is True
    [run] = rows(sink, t.dag_run, "run_id")
    assert (run["state"], run["start_date"], run["end_date"]) == ("success", T0, T0)
    attempts = rows(sink, t.task_instance, "try_number")
    assert [(a["try_number"], a["state"], a["exit_code"]) for a in attempts] == [
        (1, "failed", 3),
        (2, "running", None),
    ]
    assert [r["fileloc"] for r in rows(sink, t.import_error, "fileloc")] == ["/dags/b.py"]


def test_second_run_for_the_same_slot_is_quarantined(db_engine: sa.Engine) -> None:
    box = Outbox()
    box.dag()
    box.run(0)
    box.run(0, run_id="manual__again")  # same (dag_id, logical_date): invariant 1
    m = Materializer(db_engine)
    assert m.write(box.entries) == 3  # the rest is written; more in test_store_quarantine.py
    assert [r["run_id"] for r in rows(db_engine, t.dag_run, "run_id")] == [RUN1]
    assert [e.seq for e in m.quarantined()] == [3]


def test_large_batch(sink: OutboxSink) -> None:
    box = Outbox()
    box.dag()
    for day in range(1500):
        box.run(day, state="success")
    assert sink.write(box.entries) == 1501
    assert len(rows(sink, t.dag_run, "run_id")) == 1500


def test_concurrent_writers_never_write_an_entry_twice(
    db_url: str, db_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Outbox()
    box.dag()
    for day in range(120):
        box.run(day)
        box.log(RUN1, day, f"line {day}\n")
    total = len(box.entries)

    applied: list[int] = []
    lock = threading.Lock()
    real_apply = materializer_module._apply

    def recording_apply(conn: sa.Connection, entries: list[OutboxEntry]) -> None:
        real_apply(conn, entries)
        with lock:
            applied.extend(e.seq for e in entries)

    monkeypatch.setattr(materializer_module, "_apply", recording_apply)
    results: dict[str, int] = {}
    failures: list[BaseException] = []

    def writer(name: str, step: int) -> None:
        engine = create_engine_for(db_url)
        try:
            m, seen = Materializer(engine), 0
            while seen < total:
                # Overlapping batches: from what this writer last saw, so often below the
                # other writer's progress, never past the DB's watermark + 1.
                seen = m.write(box.entries[seen : seen + step])
            results[name] = m.watermark()
        except BaseException as err:
            failures.append(err)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=writer, args=(n, s)) for n, s in (("a", 7), ("b", 11))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert results == {"a": total, "b": total}
    assert sorted(applied) == list(range(1, total + 1))
    assert len(rows(db_engine, t.task_log, "chunk_seq")) == 120
