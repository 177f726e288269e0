"""raftsched.store.rebuild: the replicated state built from a DB's history (SQLite and PG).

A DAG ``a >> b``: an old finished run (outside the retention window: only its slot counts),
a run whose ``a`` succeeded and whose ``b`` was RUNNING under token 77 when the journals were
lost, a run with ``a`` queued, and a finished manual run on a slot the scheduler has yet to
reach. The rebuilt state must restore, continue the outbox after the watermark (closing the
lost attempt first), put ``b`` up for retry with one more try, keep the queued task and the
future manual run, go on from the last scheduled slot, and start its log above every index
the DB has seen.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from raftsched.core.model import DagSpec, Schedule, ScheduleKind, TaskSpec, TaskState
from raftsched.core.state import SchedulerState
from raftsched.store import tables as t
from raftsched.store.rebuild import INDEX_MARGIN, LOST_MESSAGE, build_state

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def _spec() -> DagSpec:
    spec = DagSpec(
        dag_id="d",
        fileloc="/dags/d.py",
        schedule=Schedule(ScheduleKind.INTERVAL, interval_seconds=1),
        start_date=NOW - 3600 * S,
        catchup=True,
        tasks=(
            TaskSpec("a", "bash", command="true", retries=1),
            TaskSpec("b", "bash", command="true", upstream=("a",)),
        ),
    )
    return DagSpec.from_dict({**spec.to_dict(), "spec_hash": spec.compute_hash()})


def _run(run_id: str, logical: datetime, state: str, run_type: str = "scheduled", **kw):  # type: ignore[no-untyped-def]
    return {
        "dag_id": "d",
        "run_id": run_id,
        "logical_date": logical,
        "data_interval_start": logical - S,
        "data_interval_end": logical,
        "run_type": run_type,
        "state": state,
        "conf": {},
        "created_at": logical,
        "start_date": logical,
        "end_date": kw.get("end"),
    }


def _ti(run_id: str, task: str, try_number: int, state: str, token: int | None = None):  # type: ignore[no-untyped-def]
    return {
        "dag_id": "d",
        "run_id": run_id,
        "task_id": task,
        "try_number": try_number,
        "state": state,
        "worker_id": "w" if token else None,
        "lease_token": token,
        "queued_at": NOW - 5 * S,
        "start_date": NOW - 4 * S if token else None,
        "end_date": None,
        "exit_code": None,
        "message": "",
    }


def test_state_rebuilt_from_the_db(db_engine: sa.Engine) -> None:
    spec = _spec()
    old, live, waiting = NOW - 2000 * S, NOW - 20 * S, NOW - 10 * S
    future = NOW + 30 * S
    with db_engine.begin() as conn:
        conn.execute(
            sa.insert(t.dags),
            [
                {
                    "dag_id": "d",
                    "fileloc": spec.fileloc,
                    "spec": spec.to_dict(),
                    "spec_hash": spec.spec_hash,
                    "paused": False,
                    "active": True,
                    "updated_at": NOW - 3000 * S,
                }
            ],
        )
        conn.execute(
            sa.insert(t.dag_run),
            [
                _run("old", old, "success", end=old + S),
                _run("live", live, "running"),
                _run("waiting", waiting, "running"),
                _run("manual__future", future, "success", "manual", end=NOW - 700 * S),
            ],
        )
        conn.execute(
            sa.insert(t.task_instance),
            [
                {**_ti("old", "a", 1, "success", 3), "end_date": old + S},
                {**_ti("old", "b", 1, "success", 4), "end_date": old + S},
                {**_ti("live", "a", 1, "success", 70), "end_date": NOW - 10 * S},
                _ti("live", "b", 1, "running", 77),
                _ti("waiting", "a", 1, "queued"),
                _ti("waiting", "b", 1, "none"),
            ],
        )
        conn.execute(
            sa.insert(t.node_heartbeat),
            [
                {
                    "node_id": "n1",
                    "address": "n1",
                    "role": "leader",
                    "term": 3,
                    "commit_index": 500,
                    "applied_index": 500,
                    "updated_at": NOW,
                    "extra": {},
                }
            ],
        )
        conn.execute(sa.update(t.materialize_watermark).values(seq=50))
        if not conn.execute(sa.select(t.materialize_watermark)).first():
            conn.execute(sa.insert(t.materialize_watermark).values(id=1, seq=50))

    plan = build_state(db_engine, now=NOW, run_retention_sec=600)
    assert plan.watermark == 50 and plan.base_index == 500 + INDEX_MARGIN
    state = SchedulerState.restore(plan.state)
    assert state.applied_index == plan.base_index
    assert state.outbox_acked_seq == 50 and state.outbox_last_seq == 51
    closing = state.outbox_after(50, 10)[0]
    assert closing.seq == 51 and closing.data["try_number"] == 1
    assert closing.data["state"] == "failed" and closing.data["message"] == LOST_MESSAGE
    assert closing.data["lease_token"] == 77

    record = state.dags["d"]
    assert record.last_logical_date == waiting and not record.paused
    runs = {rid for group in plan.state["runs"] for rid in [group["run_id"]]}
    assert runs == {"live", "waiting", "manual__future"}  # "old" is only a slot now
    b = state.task_instance(_key("live", "b"))
    assert b is not None and b.state is TaskState.UP_FOR_RETRY and b.try_number == 1
    assert b.max_tries >= 2 and b.lease is None
    retry = state.ready_to_queue(NOW)
    assert [(q.key.run_id, q.key.task_id) for q in retry] == [("live", "b")]
    a = state.task_instance(_key("waiting", "a"))
    assert a is not None and a.state is TaskState.QUEUED and a.try_number == 0
    assert state.digest()  # a whole, checkable state
    assert plan.counts["attempts_lost"] == 1


def test_secrets_and_callback_jobs_survive_materialize_and_rebuild(db_engine: sa.Engine) -> None:
    """What apply emits (test_persisted's scenario) lands in the DB as ciphertext and comes
    back whole: a variable, a connection, a deleted one gone, the pending callback job."""
    from raftsched.core import commands as c
    from raftsched.core.persisted import SINCE_RELEASE
    from raftsched.store.materializer import Materializer
    from tests.unit.test_persisted import NOTIFY, _set
    from tests.unit.test_state_harness import Sim, at, dag, task

    sim = Sim()
    sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=at(0), version=SINCE_RELEASE))
    assert sim.register(dag("d", task("a", callbacks=(NOTIFY,)))).ok
    sim.create("d")
    var = _set(sim, "MY_VAR", "clear-var")
    conn = _set(sim, "wh", "postgresql://u:clear-pw@h/db", kind="connection")
    _set(sim, "gone", "clear-gone")
    sim.apply(c.DeleteSecret(request_id=sim.rid(), now=at(2), kind="variable", key="gone"))
    sim.run_task("a", success=False)  # its on-failure callback is pending
    [job] = sim.state.callbacks.jobs()
    Materializer(db_engine).write(sim.state.outbox_after(0, 10_000))
    with db_engine.connect() as db:
        stored = db.execute(sa.select(t.secret.c.key, t.secret.c.ciphertext)).all()
        jobs = db.execute(sa.select(t.callback_job.c.job_id, t.callback_job.c.state)).all()
    assert sorted(map(tuple, stored)) == [("MY_VAR", var), ("wh", conn)]
    assert [tuple(j) for j in jobs] == [(job.job_id, "pending")]

    plan = build_state(db_engine, now=at(10), run_retention_sec=600)
    state = SchedulerState.restore(plan.state)
    assert {ref: rec.ciphertext for ref, rec in state.secrets.items()} == {
        ("variable", "MY_VAR"): var,
        ("connection", "wh"): conn,
    }
    assert list(state.callbacks.jobs()) == [job]
    assert [j.job_id for j in state.callbacks.leasable(at(10))] == [job.job_id]
    assert state.callbacks.next_seq() == job.seq + 1
    assert plan.counts["secrets"] == 2 and plan.counts["callbacks_open"] == 1
    assert state.recompute_digest() == state.digest()


def _key(run_id: str, task_id: str):  # type: ignore[no-untyped-def]
    from raftsched.core.model import TaskKey

    return TaskKey("d", run_id, task_id)


def test_skipped_ranges_come_back_and_explain_answers_as_before(db_engine: sa.Engine) -> None:
    """The DAG's newest 20 skipped ranges come back from the skipped_slots table (25 rows, the
    newest after the last run): the schedule goes on after that one, and `dags explain` gives
    the rebuilt record the answer the live one gave."""
    from raftsched.core import explain as ex
    from raftsched.core.limits import MAX_SKIP_RECORDS
    from raftsched.core.model import DagRecord
    from raftsched.core.slot_policy import SkippedSlots

    spec = _spec()
    reasons = ["paused", "leader_unavailable", "not_parsed", "overlap", "catchup"]
    ranges = [
        SkippedSlots(
            NOW - (1000 - 10 * i) * S,
            NOW - (995 - 10 * i) * S,
            6,
            reasons[i % len(reasons)],
            NOW - (990 - 10 * i) * S,
        )
        for i in range(25)
    ]
    with db_engine.begin() as conn:
        conn.execute(
            sa.insert(t.dags),
            [
                {
                    "dag_id": "d",
                    "fileloc": spec.fileloc,
                    "spec": spec.to_dict(),
                    "spec_hash": spec.spec_hash,
                    "paused": False,
                    "active": True,
                    "updated_at": NOW - 3000 * S,
                }
            ],
        )
        conn.execute(sa.insert(t.dag_run), [_run("r", NOW - 800 * S, "success", end=NOW)])
        conn.execute(
            sa.insert(t.skipped_slots),
            [
                {
                    "dag_id": "d",
                    "first_slot": r.first,
                    "last_slot": r.last,
                    "slots": r.count,
                    "reason": r.reason,
                    "decided_at": r.at,
                }
                for r in ranges
            ],
        )
    state = SchedulerState.restore(build_state(db_engine, now=NOW).state)
    record = state.dags["d"]
    assert record.skipped == tuple(ranges[-MAX_SKIP_RECORDS:])
    assert record.last_logical_date == ranges[-1].last  # past the newest range, not the run
    live = DagRecord(spec, last_logical_date=ranges[-1].last, skipped=record.skipped)
    for skipped in ranges[-3:]:
        at = skipped.first + S
        want = ex.explain(live, at, NOW)
        got = ex.explain(record, at, NOW)
        assert got == want and got.verdict == ex.SKIPPED and skipped.reason in got.detail
    # a paused DAG comes back paused since its row last changed, and explain says so
    with db_engine.begin() as conn:
        conn.execute(sa.update(t.dags).values(paused=True, updated_at=NOW - 5 * S))
    paused = SchedulerState.restore(build_state(db_engine, now=NOW).state).dags["d"]
    answer = ex.explain(paused, NOW + 10 * S, NOW + 10 * S)
    assert answer.verdict == ex.PAUSED
    assert f"paused since {(NOW - 5 * S).isoformat()}" in answer.detail


def test_pools_survive_materialize_and_rebuild(db_engine: sa.Engine) -> None:
    """SetPool/DeletePool reach the ``pool`` table through the outbox (a deleted pool's row
    goes, a changed one is replaced) and come back whole with a rebuild."""
    from raftsched.core import commands as c
    from raftsched.core import pool_commands as pc
    from raftsched.core.persisted import SINCE_RELEASE
    from raftsched.store.materializer import Materializer
    from tests.unit.test_state_harness import Sim, at

    sim = Sim()
    sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=at(0), version=SINCE_RELEASE))
    for name, slots, when in (("etl", 2, 1), ("gone", 1, 2), ("etl", 3, 3)):
        command = pc.SetPool(request_id=sim.rid(), now=at(when), name=name, slots=slots)
        assert sim.apply(command).ok
    assert sim.apply(pc.DeletePool(request_id=sim.rid(), now=at(4), name="gone")).ok
    Materializer(db_engine).write(sim.state.outbox_after(0, 10_000))
    with db_engine.connect() as db:
        rows = db.execute(sa.select(t.pool.c.name, t.pool.c.slots)).all()
    assert [tuple(row) for row in rows] == [("etl", 3)]

    plan = build_state(db_engine, now=at(10), run_retention_sec=600)
    state = SchedulerState.restore(plan.state)
    assert state.pools.to_list() == sim.state.pools.to_list()
    assert plan.counts["pools"] == 1
    assert state.recompute_digest() == state.digest()


def test_asset_events_survive_materialize_and_rebuild(db_engine: sa.Engine) -> None:
    """Every event reaches asset_event and each asset-triggered run its links; a rebuilt
    state goes on with the next event id (never one the DB holds), keeps each asset's newest
    events and count, the client event ids (a retry stays a duplicate), and an unfinished
    asset-triggered run gets back the events it carried."""
    from dataclasses import replace

    from raftsched.core import asset_commands as acm
    from raftsched.core import asset_condition as ac
    from raftsched.core import commands as c
    from raftsched.core.model import RunType
    from raftsched.store.materializer import Materializer
    from tests.unit.test_state_harness import Sim, at, dag, task

    A, B = "s3://bucket/a", "s3://bucket/b"
    sim = Sim()
    sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=at(0), version=3))
    spec = dag("both", task("t"), asset_condition=ac.canonical_json({"all": [A, B]}))
    assert sim.register(replace(spec, schedule=Schedule(ScheduleKind.NONE))).ok

    def emit(uri: str, key: str = "", extra: str = "{}", now: datetime = NOW) -> None:
        event = acm.AssetEventIn(uri, extra, key)
        assert sim.apply(acm.EmitAssetEvents(request_id=sim.rid(), now=now, events=(event,))).ok

    def asset_runs(_sim: Sim, dag_id: str) -> list:
        return [
            r.run
            for r in sim.state.run_table.records()
            if r.run.run_type is RunType.ASSET_TRIGGERED
        ]

    emit(A, key="k-a", now=at(1))
    emit(B, extra='{"rows": 3}', now=at(2))
    emit(A, now=at(3))  # queued for the next run of "both"
    (run,) = asset_runs(sim, "both")
    Materializer(db_engine).write(sim.state.outbox_after(0, 10_000))
    with db_engine.connect() as db:
        events = db.execute(sa.select(t.asset_event.c.id, t.asset_event.c.uri)).all()
        links = db.execute(sa.select(t.asset_event_run)).all()
    assert sorted(map(tuple, events)) == [(1, A), (2, B), (3, A)]
    assert sorted(map(tuple, links)) == [(1, "both", run.run_id), (2, "both", run.run_id)]

    plan = build_state(db_engine, now=at(10), run_retention_sec=600)
    state = SchedulerState.restore(plan.state)
    assert state.assets.next_id() == 4 and state.assets.count(A) == 2
    assert [e.id for e in state.assets.events(A)] == [1, 3]
    assert state.assets.event_for_key("k-a") == 1
    rebuilt = state.run("both", run.run_id)
    assert rebuilt is not None and rebuilt.asset_events_json == run.asset_events_json
    assert state.recompute_digest() == state.digest()
    state.cluster_version = 3  # a rebuilt cluster starts at 1; its finalizer raises it
    result = state.apply(
        acm.EmitAssetEvents(
            request_id="again", now=at(11), events=(acm.AssetEventIn(A, "{}", "k-a"),)
        ),
        log_index=plan.base_index + 1,
    )
    assert result.value[0].reason == acm.DUPLICATE_EVENT
