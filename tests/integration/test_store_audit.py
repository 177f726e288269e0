"""Audit records reach the metadata DB once (AUDIT outbox entries, insert only, migration 0006)
and read back newest first with their filters, on SQLite and PostgreSQL; the in-memory
materializer keeps the same rows."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from cryptography.fernet import Fernet

from raftsched.core import commands as c
from raftsched.core.model import OutboxKind
from raftsched.core.versions import RELEASE
from raftsched.store import audit_log
from raftsched.store import tables as t
from raftsched.store.materializer import Materializer
from raftsched.store.memory import MemoryMaterializer
from tests.unit.test_state_harness import T0, Sim, at, dag, task

TOKEN = Fernet(Fernet.generate_key()).encrypt(b"v").decode()


def _sim() -> Sim:
    sim = Sim()
    sim.register(dag("d", task("a")), dag("e", task("b")))
    sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=T0, version=RELEASE))
    for i, (dag_id, actor) in enumerate([("d", "ci"), ("e", "alice via web"), ("d", "bob")]):
        cmd = c.SetPaused(request_id=sim.rid(), now=at(i), dag_id=dag_id, paused=True, actor=actor)
        assert sim.apply(cmd).ok
    cmd = c.SetSecret(
        request_id=sim.rid(), now=at(9), kind="variable", key="V", ciphertext=TOKEN, actor="ci"
    )
    assert sim.apply(cmd).ok
    return sim


def test_records_are_written_once_and_read_newest_first(db_engine: sa.Engine) -> None:
    sim = _sim()
    entries = sim.state.outbox_after(0, 10_000)
    assert sum(e.kind is OutboxKind.AUDIT for e in entries) == 4
    writer = Materializer(db_engine)
    writer.write(entries[:-2])
    writer.write(entries)  # a new leader writing from the watermark: nothing twice
    with db_engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(t.audit_log)).scalar() == 4

    def ids(**filters: object) -> list[int]:
        return [r.id for r in audit_log.list_records(db_engine, limit=10, **filters)]

    assert ids() == [4, 3, 2, 1]
    assert ids(dag_id="d") == [3, 1]
    assert ids(actor="alice") == [2] == ids(actor="alice via web")
    assert ids(actor="ali") == []  # the user part whole, not a prefix
    assert ids(before_id=3) == [2, 1]
    assert ids(since=T0 + timedelta(seconds=2)) == [4, 3]
    [newest] = audit_log.list_records(db_engine, limit=1)
    assert (newest.actor, newest.action, newest.detail, newest.at) == (
        "ci",
        "set_variable",
        "V",
        at(9),
    )
    assert [row.id for row in sim.state.audit] == [1, 2, 3, 4]


def test_the_memory_materializer_keeps_the_same_rows() -> None:
    memory = MemoryMaterializer()
    memory.write(_sim().state.outbox_after(0, 10_000))
    rows = memory.rows("audit_log")
    assert [(r["id"], r["actor"], r["action"]) for r in rows] == [
        (1, "ci", "pause"),
        (2, "alice via web", "pause"),
        (3, "bob", "pause"),
        (4, "ci", "set_variable"),
    ]


def test_a_rebuilt_state_goes_on_numbering_after_the_db(db_engine: sa.Engine) -> None:
    from raftsched.core.state import SchedulerState
    from raftsched.store.rebuild import build_state

    sim = _sim()
    Materializer(db_engine).write(sim.state.outbox_after(0, 10_000))
    plan = build_state(db_engine, now=at(20), run_retention_sec=600)
    state = SchedulerState.restore(plan.state)
    assert [(r.id, r.actor, r.action) for r in state.audit] == [
        (r.id, r.actor, r.action) for r in sim.state.audit
    ]
    assert state.audit.next_id == 5 and state.recompute_digest() == state.digest()
