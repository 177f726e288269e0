"""A row the DB refuses never stops the materializer (docs/architecture.md §5, issue #9): it is
isolated by bisection, the rest of its batch is written, it goes to the quarantine with the
DB's error and the watermark moves past it, exactly once; `raftsched db quarantine list|retry`
show and re-write it. On SQLite and PostgreSQL (and the in-memory sink's simulation)."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from test_store_materializer import RUN1, T0, Outbox, rows

from raftsched.cli.main import main
from raftsched.cluster.materializer_driver import MaterializerDriver
from raftsched.core.model import OutboxEntry, OutboxKind
from raftsched.errors import StoreUnavailable
from raftsched.store import materializer as materializer_module
from raftsched.store import quarantine as q
from raftsched.store import tables as t
from raftsched.store.engine import create_engine_for
from raftsched.store.materializer import Materializer
from raftsched.store.memory import MemoryMaterializer
from raftsched.store.migrate import init_db
from raftsched.store.quarantine import MAX_ERROR_CHARS, refusal_reason, sanitize_error

DUP = "manual__dup"  # a second run for day 0's slot: (dag_id, logical_date) is unique


def _bad_batch() -> Outbox:
    """dag, run0, log with NUL (PostgreSQL refuses it), dup run for run0's slot (both refuse),
    task, run0 again (running: must win, it comes after the refused entries), run1."""
    box = Outbox()
    box.dag()
    box.run(0)
    box.log(RUN1, 0, "before\x00after\n")
    box.run(0, run_id=DUP)
    box.task(RUN1, 1, "running")
    box.run(0, state="running")
    box.run(1)
    return box


def _is_pg(engine: sa.Engine) -> bool:
    return engine.dialect.name == "postgresql"


def test_refused_entries_are_quarantined_and_the_rest_is_written(db_engine: sa.Engine) -> None:
    box = _bad_batch()
    m = Materializer(db_engine)
    assert m.write(box.entries) == 7
    assert m.watermark() == 7

    refused = [3, 4] if _is_pg(db_engine) else [4]  # SQLite stores NUL in text
    quarantined = m.quarantined()
    assert [e.seq for e in quarantined] == refused
    dup = quarantined[-1]
    assert dup.kind == "dag_run" and dup.key == {"dag_id": "etl", "run_id": DUP}
    assert "unique" in dup.error.lower()
    assert dup.entry.data == box.entries[3].data  # the entry as it was
    if _is_pg(db_engine):
        nul = quarantined[0]
        assert "NUL" in nul.error and nul.data["text"] == "before\x00after\n"
        table = t.outbox_quarantine
        with db_engine.connect() as conn:  # stored as ASCII JSON with NUL escaped
            raw = conn.execute(sa.select(table.c.data).where(table.c.seq == 3)).scalar_one()
        assert "\\u0000" in raw and "\x00" not in raw

    runs = rows(db_engine, t.dag_run, "logical_date")
    assert [(r["run_id"], r["state"]) for r in runs] == [
        (RUN1, "running"),
        (box.entries[6].data["run_id"], "queued"),
    ]
    assert len(rows(db_engine, t.task_instance, "try_number")) == 1
    assert len(rows(db_engine, t.task_log, "chunk_seq")) == (0 if _is_pg(db_engine) else 1)

    # Exactly once: the same batch again is a no-op, quarantine included.
    with db_engine.begin() as conn:
        conn.execute(sa.update(t.dag_run).values(state="marker"))
    assert m.write(box.entries) == 7
    assert [e.seq for e in m.quarantined()] == refused
    assert {r["state"] for r in rows(db_engine, t.dag_run, "run_id")} == {"marker"}
    assert m.quarantined_count() == len(refused)


def test_a_batch_whose_every_entry_is_refused_is_an_outage_not_a_quarantine(
    db_engine: sa.Engine,
) -> None:
    """Eight or more entries, all refused: the database is at fault (schema, permissions), so
    nothing is quarantined or acknowledged; the driver backs off and retries."""
    box = Outbox()
    box.dag()
    box.run(0)
    m = Materializer(db_engine)
    assert m.write(box.entries) == 2
    for i in range(8):
        box.run(0, run_id=f"{DUP}-{i}")  # each a second run for run0's slot
    with pytest.raises(StoreUnavailable, match="refused all 8"):
        m.write(box.entries)
    assert m.watermark() == 2 and m.quarantined_count() == 0


def test_k_refused_entries_out_of_n_are_isolated_in_o_k_log_n_tries(
    db_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Outbox()
    box.dag()
    for day in range(63):
        box.run(day)
    bad_days = [0, 1, 30, 62]  # adjacent ones, one in the middle, the very last
    for day in bad_days:
        box.run(day, run_id=f"manual__dup{day}")
    box.run(62, state="success")  # after the refused ones: applies in seq order
    n, k = len(box.entries), len(bad_days)

    tries = 0
    real_apply = materializer_module._apply

    def counting_apply(conn: sa.Connection, entries: list[OutboxEntry]) -> None:
        nonlocal tries
        tries += 1
        real_apply(conn, entries)

    monkeypatch.setattr(materializer_module, "_apply", counting_apply)
    m = Materializer(db_engine)
    assert m.write(box.entries) == n
    assert [e.seq for e in m.quarantined()] == list(range(65, 65 + k))
    assert tries <= 1 + 2 * k * math.ceil(math.log2(n))
    runs = rows(db_engine, t.dag_run, "logical_date")
    assert len(runs) == 63 and not any(r["run_id"].startswith("manual__") for r in runs)
    assert runs[-1]["state"] == "success"


def test_a_batch_without_refusals_is_one_try(
    db_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = Outbox()
    box.dag()
    box.run(0)
    calls: list[int] = []
    real_apply = materializer_module._apply
    monkeypatch.setattr(
        materializer_module, "_apply", lambda c, e: (calls.append(len(e)), real_apply(c, e))
    )
    assert Materializer(db_engine).write(box.entries) == 2
    assert calls == [2]
    assert Materializer(db_engine).quarantined_count() == 0


def _connection_lost(conn: sa.Connection, entries: list[OutboxEntry]) -> None:
    raise sa.exc.OperationalError("INSERT ...", {}, Exception("server closed the connection"))


def test_an_unreachable_database_is_never_quarantined(
    db_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = _bad_batch()
    m = Materializer(db_engine)
    monkeypatch.setattr(materializer_module, "_apply", _connection_lost)
    with pytest.raises(StoreUnavailable, match="server closed the connection"):
        m.write(box.entries)
    monkeypatch.undo()
    assert m.watermark() == 0 and m.quarantined_count() == 0
    assert rows(db_engine, t.dags, "dag_id") == []
    assert m.write(box.entries) == 7  # back: written, refusals isolated as usual


def test_a_closed_port_is_store_unavailable_not_quarantine() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    engine = create_engine_for(f"postgresql+psycopg://u@127.0.0.1:{port}/x", connect_timeout=1)
    with pytest.raises(StoreUnavailable):
        Materializer(engine).write(_bad_batch().entries)


def test_what_counts_as_a_refusal_of_the_row() -> None:
    class Orig(Exception):
        sqlstate = "42501"  # insufficient privilege: about the role, not the row

    assert refusal_reason(sa.exc.IntegrityError("s", {}, Exception("UNIQUE failed"))) is not None
    assert refusal_reason(sa.exc.DataError("s", {}, Exception("NUL"))) is not None
    assert refusal_reason(sa.exc.ProgrammingError("s", {}, Exception("bad type"))) is not None
    assert refusal_reason(sa.exc.ProgrammingError("s", {}, Orig("permission denied"))) is None
    assert refusal_reason(sa.exc.OperationalError("s", {}, Exception("gone"))) is None
    assert refusal_reason(sa.exc.InterfaceError("s", {}, Exception("closed"))) is None
    assert refusal_reason(UnicodeEncodeError("utf-8", "\udc80", 0, 1, "surrogates")) is not None
    assert refusal_reason(KeyError("dag_id")) is None  # a malformed entry is a bug, not a row


def test_sanitized_errors_are_one_line_of_printable_ascii() -> None:
    text = sanitize_error("first\x00 line ✓\nDETAIL:  Key (x)=(y)\n" + "z" * 5000)
    assert text.isascii() and text.isprintable() and len(text) == MAX_ERROR_CHARS
    assert text.startswith("first\\x00 line \\u2713; DETAIL:  Key (x)=(y); zzz")


def test_memory_sink_simulates_refusals_with_the_same_contract() -> None:
    box = _bad_batch()
    sink = MemoryMaterializer(refuse=lambda e: "unique" if e.data.get("run_id") == DUP else None)
    assert sink.write(box.entries) == 7
    assert [(e.seq, e.error) for e in sink.quarantined()] == [(4, "unique")]
    assert sink.quarantined_count() == 1
    assert sink.write(box.entries) == 7 and sink.quarantined_count() == 1
    assert {r["run_id"] for r in sink.rows("dag_run")} == {RUN1, box.entries[6].data["run_id"]}


def test_a_surrogate_in_a_log_is_quarantined(db_engine: sa.Engine) -> None:
    box = Outbox()
    box.log(RUN1, 0, "bad \udc80 byte")
    box.log(RUN1, 1, "fine")
    m = Materializer(db_engine)
    assert m.write(box.entries) == 2
    [bad] = m.quarantined()
    assert bad.seq == 1 and bad.data["text"] == "bad \udc80 byte"
    assert [r["text"] for r in rows(db_engine, t.task_log, "chunk_seq")] == ["fine"]


# -- the materializer driver keeps going -----------------------------------------------------


class _State:
    def __init__(self, entries: list[OutboxEntry]) -> None:
        self.entries = list(entries)
        self.acked = 0

    def outbox_after(self, seq: int, limit: int) -> list[OutboxEntry]:
        return [e for e in self.entries if e.seq > seq][:limit]

    @property
    def outbox_last_seq(self) -> int:
        return self.entries[-1].seq if self.entries else 0

    @property
    def outbox_acked_seq(self) -> int:
        return self.acked


class _Node:
    """What MaterializerDriver uses of SchedulerNode: a leader that never changes."""

    is_leader = True
    term = 1

    def __init__(self, state: _State) -> None:
        self.state = state
        self.lock = threading.Lock()

    def read(self, fn: Any) -> Any:
        with self.lock:
            return fn(self.state)

    def add_apply_listener(self, listener: Any) -> None: ...
    def remove_apply_listener(self, listener: Any) -> None: ...
    def add_role_listener(self, listener: Any) -> None: ...


class _Proposer:
    commit_timeout = 1.0

    def __init__(self, node: _Node) -> None:
        self.node = node

    def make(self, cls: type, **fields: Any) -> Any:
        return SimpleNamespace(**fields)

    def propose(self, command: Any, **_kwargs: Any) -> None:
        if not hasattr(command, "seq"):  # the barrier a new leader commits first
            return
        with self.node.lock:
            self.node.state.acked = command.seq


def test_the_driver_keeps_materializing_after_a_refused_entry(sqlite_url: str) -> None:
    engine = create_engine_for(sqlite_url)
    init_db(engine)
    box = _bad_batch()
    node = _Node(_State(box.entries))
    sink = Materializer(engine)
    driver = MaterializerDriver(node, _Proposer(node), sink, batch=3, idle_wait=0.05)  # type: ignore[arg-type]
    driver.start()
    try:
        assert _eventually(lambda: node.state.acked == 7 and driver.quarantined == 1)
        assert driver.store_ok and driver.last_error is None and driver.db_watermark == 7
        box.run(2)  # more work after the refusal is written too
        with node.lock:
            node.state.entries = list(box.entries)
        assert _eventually(lambda: node.state.acked == 8)
        assert len(rows(engine, t.dag_run, "run_id")) == 3
    finally:
        driver.stop()
        engine.dispose()


def _eventually(check: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return bool(check())


# -- raftsched db quarantine list | retry ----------------------------------------------------


def test_cli_quarantine_list_and_retry(
    db_engine: sa.Engine, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    box = Outbox()
    box.dag()
    box.run(0)
    box.run(0, run_id=DUP)
    box.task(DUP, 1, "queued")
    Materializer(db_engine).write(box.entries)

    assert main(["db", "quarantine", "list", "--url", db_url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["SEQ", "KIND", "KEY", "ERROR", "QUARANTINED_AT"]
    assert out[1].startswith("3    dag_run  etl/manual__dup  ")
    assert "unique" in out[1].lower() and out[-1].startswith("1 quarantined")

    assert main(["db", "quarantine", "list", "--url", db_url, "--output", "json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["seq"] == 3 and listed["key"] == {"dag_id": "etl", "run_id": DUP}
    assert listed["data"]["run_id"] == DUP and listed["quarantined_at"].startswith("20")

    # Still conflicting: refused again, kept, the DB's error printed, exit 1.
    assert main(["db", "quarantine", "retry", "3", "--url", db_url]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("seq 3 (dag_run): refused again, kept: ") and "unique" in line.lower()
    assert main(["db", "quarantine", "retry", "99", "--url", db_url]) == 1
    assert "seq 99: not in quarantine" in capsys.readouterr().out
    assert main(["db", "quarantine", "retry", "--url", db_url]) == 2  # SEQ or --all

    with db_engine.begin() as conn:  # the operator resolves the conflict
        conn.execute(sa.delete(t.dag_run).where(t.dag_run.c.run_id == RUN1))
    assert main(["db", "quarantine", "retry", "--all", "--url", db_url, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"seq": 3, "kind": "dag_run", "written": True, "error": None, "newer": False}
    ]
    assert [r["run_id"] for r in rows(db_engine, t.dag_run, "run_id")] == [DUP]
    assert Materializer(db_engine).watermark() == 4  # retry never moves the watermark
    assert main(["db", "quarantine", "list", "--url", db_url]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 quarantined"
    assert main(["db", "quarantine", "retry", "--all", "--url", db_url]) == 0
    assert capsys.readouterr().out.strip() == "nothing in quarantine"


def test_cli_quarantine_on_an_unmigrated_database_says_migrate(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "quarantine", "list", "--url", db_url]) == 1
    assert "raftsched db migrate" in capsys.readouterr().err


def test_quarantine_kinds_round_trip(db_engine: sa.Engine) -> None:
    """Every kind's data survives the quarantine's JSON (datetimes are ISO text already)."""
    box = Outbox()
    box.dag()
    box.errors("/dags/a.py")
    m = Materializer(db_engine)
    with db_engine.begin() as conn:  # quarantine by hand, as a refused write would
        q.put(conn, [q.quarantine_row(e, "refused", T0) for e in box.entries])
    loaded = m.quarantined()
    assert [(e.entry.kind, e.entry.data) for e in loaded] == [
        (OutboxKind(x.kind), x.data) for x in box.entries
    ]
    # An import-error list replaces a table later parses rewrote: only forced.
    assert [(o.written, o.newer) for o in m.retry_quarantined()] == [(True, False), (False, True)]
    assert rows(db_engine, t.import_error, "fileloc") == []
    assert [o.written for o in m.retry_quarantined(force=True)] == [True]
    assert [r["fileloc"] for r in rows(db_engine, t.import_error, "fileloc")] == ["/dags/a.py"]


def test_cli_retry_never_overwrites_a_newer_row_without_force(
    db_engine: sa.Engine, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The quarantined run (seq 3) is older than the row its key got later (seq 4): retry
    leaves both alone and says why; --force writes it over the newer row."""
    box = Outbox()
    box.dag()
    box.run(0)
    box.run(0, run_id=DUP)  # refused: the slot is RUN1's
    m = Materializer(db_engine)
    m.write(box.entries)
    assert [e.seq for e in m.quarantined()] == [3]
    with db_engine.begin() as conn:  # the operator frees the slot ...
        conn.execute(sa.delete(t.dag_run).where(t.dag_run.c.run_id == RUN1))
    box.run(0, run_id=DUP, state="running")  # ... and the run's later state lands (seq 4)
    m.write(box.entries)

    def dup_row() -> tuple[str, int | None]:
        [row] = [r for r in rows(db_engine, t.dag_run, "run_id") if r["run_id"] == DUP]
        return row["state"], row["outbox_seq"]

    assert dup_row() == ("running", 4)
    assert main(["db", "quarantine", "retry", "3", "--url", db_url]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("seq 3 (dag_run): not written, kept: the dag_run row (")
    assert "outbox seq 4, newer than this entry (seq 3)" in line and "--force" in line
    assert dup_row() == ("running", 4) and [e.seq for e in m.quarantined()] == [3]

    with db_engine.begin() as conn:  # a row from before migration 0005 cannot say
        conn.execute(sa.update(t.dag_run).where(t.dag_run.c.run_id == DUP).values(outbox_seq=None))
    assert main(["db", "quarantine", "retry", "--all", "--url", db_url, "-o", "json"]) == 1
    [outcome] = json.loads(capsys.readouterr().out)
    assert outcome["newer"] and "before rows recorded their outbox seq" in outcome["error"]
    assert dup_row() == ("running", None)

    assert main(["db", "quarantine", "retry", "3", "--force", "--url", db_url]) == 0
    assert "written, removed from quarantine" in capsys.readouterr().out
    assert dup_row() == ("queued", 3) and m.quarantined() == []
