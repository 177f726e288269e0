"""History queries, node heartbeats and users, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from raftsched.core.model import (
    DagSpec,
    ImportErrorRecord,
    OutboxEntry,
    OutboxKind,
    RunState,
    RunType,
    Schedule,
    ScheduleKind,
    TaskState,
    utc_iso,
)
from raftsched.errors import UserError
from raftsched.store import queries
from raftsched.store.heartbeats import (
    NodeHeartbeat,
    list_heartbeats,
    record_heartbeat,
    remove_heartbeat,
)
from raftsched.store.materializer import Materializer
from raftsched.store.users import create_user, list_users, verify_user

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def _write(engine: sa.Engine, *items: tuple[OutboxKind, dict[str, Any]]) -> None:
    m = Materializer(engine)
    start = m.watermark()
    m.write([OutboxEntry(start + i, kind, data) for i, (kind, data) in enumerate(items, 1)])


def _dag(dag_id: str, *, paused: bool = False, active: bool = True) -> tuple[OutboxKind, dict]:
    spec = DagSpec(
        dag_id=dag_id, fileloc=f"/dags/{dag_id}.py", schedule=Schedule(ScheduleKind.NONE)
    )
    data = {
        "dag_id": dag_id,
        "fileloc": spec.fileloc,
        "spec": spec.to_dict(),
        "spec_hash": spec.compute_hash(),
        "paused": paused,
        "active": active,
        "updated_at": utc_iso(T0),
    }
    return OutboxKind.DAG, data


def _run(dag_id: str, day: int, state: str, run_type: str = "scheduled") -> tuple[OutboxKind, dict]:
    logical = T0 + timedelta(days=day)
    data = {
        "dag_id": dag_id,
        "run_id": f"{run_type}__{logical.isoformat()}",
        "logical_date": utc_iso(logical),
        "data_interval_start": utc_iso(logical),
        "data_interval_end": utc_iso(logical + timedelta(days=1)),
        "run_type": run_type,
        "state": state,
        "conf": {},
        "created_at": utc_iso(logical),
        "start_date": None,
        "end_date": None,
    }
    return OutboxKind.DAG_RUN, data


@pytest.fixture
def history(db_engine: sa.Engine) -> sa.Engine:
    """Two active DAGs (one paused), one inactive; ``etl`` has 10 runs over 10 days."""
    states = ["success", "failed", "running", "success", "queued"] * 2
    _write(
        db_engine,
        _dag("etl"),
        _dag("report", paused=True),
        _dag("old", active=False),
        *(
            _run("etl", day, state, "manual" if day == 4 else "scheduled")
            for day, state in enumerate(states)
        ),
        _run("report", 0, "success"),
    )
    return db_engine


def test_list_dags_filters(history: sa.Engine) -> None:
    assert [d.dag_id for d in queries.list_dags(history)] == ["etl", "report"]
    assert [d.dag_id for d in queries.list_dags(history, active=None)] == ["etl", "old", "report"]
    [report] = queries.list_dags(history, paused=True)
    assert report.dag_id == "report" and report.paused and report.spec.dag_id == "report"
    assert report.updated_at == T0
    assert [d.dag_id for d in queries.list_dags(history, limit=1, offset=1)] == ["report"]


def test_list_runs_newest_first_with_filters(history: sa.Engine) -> None:
    runs = queries.list_runs(history, "etl")
    assert [r.logical_date.day for r in runs] == list(range(10, 0, -1))
    assert runs[0].logical_date == T0 + timedelta(days=9)
    assert runs[0].logical_date.tzinfo == UTC

    success = queries.list_runs(history, "etl", states=[RunState.SUCCESS])
    assert [r.logical_date.day for r in success] == [9, 6, 4, 1]
    assert all(r.state is RunState.SUCCESS for r in success)
    manual = queries.list_runs(history, "etl", run_type=RunType.MANUAL)
    assert [r.run_type for r in manual] == [RunType.MANUAL]
    assert queries.count_runs(history, "etl", states=["success", "failed"]) == 6
    assert queries.count_runs(history) == 11
    assert len(queries.list_runs(history)) == 11


def test_list_runs_paging(history: sa.Engine) -> None:
    page1 = queries.list_runs(history, "etl", limit=4)
    page2 = queries.list_runs(history, "etl", limit=4, offset=4)
    keyset2 = queries.list_runs(history, "etl", limit=4, before=page1[-1].logical_date)
    assert [r.run_id for r in page2] == [r.run_id for r in keyset2]
    assert [r.logical_date.day for r in page1 + page2] == list(range(10, 2, -1))
    with pytest.raises(ValueError, match="negative"):
        queries.list_runs(history, limit=-1)


def test_get_run(history: sa.Engine) -> None:
    run_id = f"scheduled__{T0.isoformat()}"
    run = queries.get_run(history, "etl", run_id)
    assert run is not None and run.run_id == run_id and run.state is RunState.SUCCESS
    assert run.data_interval_end == T0 + timedelta(days=1)
    assert queries.get_run(history, "etl", "nope") is None


def test_task_attempts_and_log_tail(db_engine: sa.Engine) -> None:
    def attempt(try_number: int, state: str) -> tuple[OutboxKind, dict]:
        return OutboxKind.TASK_INSTANCE, {
            "dag_id": "etl", "run_id": "r1", "task_id": "load", "try_number": try_number,
            "state": state, "worker_id": "w", "lease_token": try_number, "queued_at": None,
            "start_date": utc_iso(T0), "end_date": None, "exit_code": None, "message": "",
        }  # fmt: skip

    def chunk(try_number: int, seq: int) -> tuple[OutboxKind, dict]:
        return OutboxKind.TASK_LOG, {
            "dag_id": "etl", "run_id": "r1", "task_id": "load", "try_number": try_number,
            "chunk_seq": seq, "stream": "stdout", "text": f"{try_number}.{seq}",
            "created_at": utc_iso(T0),
        }  # fmt: skip

    _write(
        db_engine,
        attempt(2, "running"),
        attempt(1, "failed"),
        *(chunk(1, s) for s in range(3)),
        *(chunk(2, s) for s in range(5)),
    )
    attempts = queries.list_task_instances(db_engine, "etl", "r1")
    assert [(a.try_number, a.state) for a in attempts] == [
        (1, TaskState.FAILED),
        (2, TaskState.RUNNING),
    ]
    assert attempts[1].start_date == T0
    assert queries.list_task_instances(db_engine, "etl", "r1", task_id="other") == []

    assert [c.text for c in queries.read_log(db_engine, "etl", "r1", "load", 1)] == [
        "1.0",
        "1.1",
        "1.2",
    ]
    tail = queries.read_log(db_engine, "etl", "r1", "load", 2, after_seq=2, limit=1)
    assert [(c.chunk_seq, c.text) for c in tail] == [(3, "2.3")]


def test_import_errors(db_engine: sa.Engine) -> None:
    errors = [{"fileloc": "/b.py", "message": "boom", "traceback": "tb"}]
    _write(db_engine, (OutboxKind.IMPORT_ERRORS, {"errors": errors, "updated_at": utc_iso(T0)}))
    assert queries.list_import_errors(db_engine) == [ImportErrorRecord("/b.py", "boom", "tb")]


# -- heartbeats -----------------------------------------------------------------------------


def test_heartbeats_upsert(db_engine: sa.Engine) -> None:
    plus_one = timezone(timedelta(hours=1))
    first = NodeHeartbeat(
        node_id="n1", address="127.0.0.1:7001", role="follower", term=1, commit_index=5,
        applied_index=5, updated_at=T0, last_leader_contact=T0.astimezone(plus_one), pid=42,
    )  # fmt: skip
    record_heartbeat(db_engine, first)
    record_heartbeat(db_engine, NodeHeartbeat("n0", "127.0.0.1:7000", "leader", 1, 5, 5, T0))
    later = NodeHeartbeat(
        node_id="n1", address="127.0.0.1:7001", role="leader", term=2, commit_index=9,
        applied_index=8, updated_at=T0 + timedelta(seconds=5), extra={"outbox_backlog": 3},
    )  # fmt: skip
    record_heartbeat(db_engine, later)

    beats = list_heartbeats(db_engine)
    assert [b.node_id for b in beats] == ["n0", "n1"]
    assert beats[1] == later
    assert beats[1].updated_at.tzinfo == UTC
    assert remove_heartbeat(db_engine, "n0") is True
    assert remove_heartbeat(db_engine, "n0") is False
    assert [b.node_id for b in list_heartbeats(db_engine)] == ["n1"]


# -- users ----------------------------------------------------------------------------------


def test_users_hash_and_verify(db_engine: sa.Engine) -> None:
    user = create_user(db_engine, "ada", "s3cret!", "admin")
    assert user.role == "admin" and user.created_at.tzinfo == UTC
    assert verify_user(db_engine, "ada", "s3cret!") == "admin"
    assert verify_user(db_engine, "ada", "wrong") is None
    assert verify_user(db_engine, "nobody", "s3cret!") is None

    with db_engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT password_hash FROM users")).scalar_one()
    assert "s3cret!" not in stored and stored.startswith("scrypt:")

    with pytest.raises(UserError, match="exists already"):
        create_user(db_engine, "ada", "other", "viewer")
    create_user(db_engine, "ada", "other", "viewer", replace=True)
    assert verify_user(db_engine, "ada", "other") == "viewer"
    assert verify_user(db_engine, "ada", "s3cret!") is None
    assert [u.username for u in list_users(db_engine)] == ["ada"]


def test_users_refuse_unknown_role_and_empty_password(db_engine: sa.Engine) -> None:
    with pytest.raises(UserError, match="unknown role 'root'"):
        create_user(db_engine, "bob", "pw", "root")
    with pytest.raises(UserError, match="must not be empty"):
        create_user(db_engine, "bob", "", "viewer")
