"""Scenarios: outbox rows and acks, eviction, idempotency, Batch, snapshot, digest."""

from __future__ import annotations

import json
import pickle
from datetime import timedelta

import pytest
from test_state_harness import T0, Sim, at, dag, run_id, task

from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core.model import OutboxKind, RunType
from raftsched.core.snapshot import SCHEMA_VERSION
from raftsched.core.state import DEDUP_CAPACITY, SchedulerState
from raftsched.errors import SnapshotVersionError


def finished_run_sim() -> Sim:
    sim = Sim()
    sim.register(dag("d", task("a", retries=1, retry_delay_seconds=0)))
    sim.create("d")
    [grant] = sim.lease(now=at(1))
    sim.complete(grant, success=False, now=at(2), exit_code=3, message="boom")
    sim.apply(c.QueueTasks(request_id="q", now=at(2), items=tuple(sim.state.ready_to_queue(at(2)))))
    [grant] = sim.lease(now=at(3), worker="w2")
    sim.complete(grant, now=at(4), exit_code=0)
    return sim


def test_task_instance_rows_one_per_attempt() -> None:
    sim = finished_run_sim()
    rows = sim.outbox("task_instance")
    assert [(x["try_number"], x["state"], x["worker_id"]) for x in rows] == [
        (1, "queued", None),
        (1, "running", "w1"),
        (1, "failed", "w1"),
        (2, "up_for_retry", None),
        (2, "queued", None),
        (2, "running", "w2"),
        (2, "success", "w2"),
    ]
    assert rows[2] == {
        "dag_id": "d",
        "run_id": run_id(),
        "task_id": "a",
        "try_number": 1,
        "state": "failed",
        "worker_id": "w1",
        "lease_token": 3,
        "queued_at": T0.isoformat(),
        "start_date": at(1).isoformat(),
        "end_date": at(2).isoformat(),
        "exit_code": 3,
        "message": "boom",
    }
    runs = sim.outbox("dag_run")
    assert [x["state"] for x in runs] == ["queued", "running", "success"]
    assert runs[-1] == {
        "dag_id": "d",
        "run_id": run_id(),
        "logical_date": T0.isoformat(),
        "data_interval_start": (T0 - timedelta(days=1)).isoformat(),
        "data_interval_end": T0.isoformat(),
        "run_type": "scheduled",
        "state": "success",
        "conf": {},
        "created_at": T0.isoformat(),
        "start_date": at(1).isoformat(),
        "end_date": at(4).isoformat(),
    }


def test_outbox_seqs_are_gapless_and_ack_drops_them() -> None:
    sim = finished_run_sim()
    state = sim.state
    entries = state.outbox_after(0, 1000)
    assert [e.seq for e in entries] == list(range(1, state.outbox_last_seq + 1))
    assert entries[0].kind is OutboxKind.DAG
    assert [e.seq for e in state.outbox_after(5, 3)] == [6, 7, 8]
    ack = c.AckMaterialized(request_id="a1", now=at(5), seq=5)
    assert sim.apply(ack).ok
    assert state.outbox_acked_seq == 5 and state.outbox_size == state.outbox_last_seq - 5
    assert state.outbox_after(0, 2)[0].seq == 6
    stale = c.AckMaterialized(request_id="a2", now=at(5), seq=4)
    assert sim.apply(stale).reason == r.STALE_ACK
    beyond = c.AckMaterialized(request_id="a3", now=at(5), seq=state.outbox_last_seq + 1)
    assert sim.apply(beyond).reason == r.ACK_BEYOND_LAST
    assert state.outbox_acked_seq == 5


def test_finished_runs_leave_memory_once_acked_and_past_retention() -> None:
    sim = finished_run_sim()  # ended at at(4)
    state = sim.state
    last = state.outbox_last_seq
    early = c.AckMaterialized(request_id="a1", now=at(10), seq=last - 1)
    assert sim.apply(early).value == 0
    sim.apply(c.AckMaterialized(request_id="a2", now=at(10), seq=last))
    assert state.run("d", run_id()) is not None  # within the retention window
    sim.create("d", T0 + timedelta(days=1), now=at(20))
    ack = c.AckMaterialized(
        request_id="a3", now=at(100), seq=state.outbox_last_seq, finished_run_retention_seconds=60
    )
    assert sim.apply(ack).value == 1
    assert state.run("d", run_id()) is None and state.run_count == 1
    assert state.last_logical_date("d") == T0 + timedelta(days=1)
    # the evicted slot is still refused for scheduled runs
    assert sim.create("d", T0).value[0].reason == r.RUN_EXISTS
    assert state.digest() == state.recompute_digest()


def test_unacked_finished_run_stays() -> None:
    sim = finished_run_sim()
    sim.create("d", T0 + timedelta(days=1))
    seq = sim.state.outbox_last_seq - 3  # the first run's last rows are not acked
    first_run_seq = max(
        e.seq for e in sim.state.outbox_after(0, 1000) if e.data.get("run_id") == run_id()
    )
    assert seq < first_run_seq
    ack = c.AckMaterialized(request_id="a", now=at(10_000), seq=seq)
    assert sim.apply(ack).value == 0
    assert sim.state.run("d", run_id()) is not None


def test_duplicate_request_is_answered_with_the_first_result() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    cmd = c.CreateRuns(request_id="same", now=T0, runs=(c.RunDecision("d", T0, T0, T0),))
    first = sim.apply(cmd)
    snapshot = sim.state.snapshot()
    again = sim.apply(cmd)
    assert again == r.Result(first.ok, first.reason, first.value, duplicate=True)
    after = sim.state.snapshot()
    assert after.pop("applied_index") == snapshot.pop("applied_index") + 1
    assert after == snapshot


def test_dedup_memory_is_bounded_fifo() -> None:
    sim = Sim()
    for i in range(DEDUP_CAPACITY + 5):
        sim.apply(c.SetPaused(request_id=f"r{i}", now=T0, dag_id="ghost", paused=True))
    snap = sim.state.snapshot()
    assert len(snap["dedup"]) == DEDUP_CAPACITY
    assert snap["dedup"][0][0] == "r5"


def test_stale_log_index_is_refused() -> None:
    state = SchedulerState()
    cmd = c.SetPaused(request_id="x", now=T0, dag_id="d", paused=True)
    state.apply(cmd, log_index=5)
    assert state.apply(cmd, log_index=5) == r.Result(False, r.STALE_INDEX)
    assert state.applied_index == 5


def test_batch_applies_in_order_and_dedups_its_parts() -> None:
    sim = Sim()
    register = c.RegisterDags(request_id="reg", now=T0, specs=(dag("d", task("a")),))
    create = c.CreateRuns(request_id="cr", now=T0, runs=(c.RunDecision("d", T0, T0, T0),))
    lease = c.LeaseTasks(request_id="ls", now=T0, worker_id="w", max_tasks=5)
    result = sim.apply(c.Batch(request_id="b1", now=T0, commands=(register, create, lease)))
    assert result.ok and len(result.value) == 3
    assert result.value[2].value[0].lease.token == sim.index
    again = sim.apply(c.Batch(request_id="b2", now=T0, commands=(create,)))
    assert again.value[0].duplicate
    unknown = sim.apply(
        c.Batch(request_id="b3", now=T0, commands=(c.Command(request_id="z", now=T0),))
    )
    assert unknown.reason == r.UNKNOWN_COMMAND


def test_naive_now_is_refused() -> None:
    sim = Sim()
    result = sim.apply(
        c.SetPaused(request_id="n", now=T0.replace(tzinfo=None), dag_id="d", paused=True)
    )
    assert result.reason == r.INVALID


# -- snapshot and digest ---------------------------------------------------------------------


def busy_sim() -> Sim:
    sim = finished_run_sim()
    sim.register(dag("e", task("x", priority_weight=3), task("y", "x", retries=2)))
    sim.create("e", run_type=RunType.MANUAL, conf={"k": [1, {"n": None}]})
    sim.create("d", T0 + timedelta(days=1))
    sim.lease(n=1, now=at(10))
    sim.apply(c.SetPaused(request_id="p", now=at(11), dag_id="d", paused=True))
    sim.apply(c.AckMaterialized(request_id="ack", now=at(12), seq=4))
    return sim


def test_snapshot_is_json_and_restores_equal() -> None:
    state = busy_sim().state
    snap = state.snapshot()
    assert snap["schema_version"] == SCHEMA_VERSION
    restored = SchedulerState.restore(json.loads(json.dumps(snap)))
    assert restored.snapshot() == snap
    assert restored.digest() == state.digest() == state.recompute_digest()
    assert pickle.loads(pickle.dumps(state)).snapshot() == snap


def test_digest_does_not_depend_on_dict_key_order() -> None:
    # A snapshot carried with sorted keys (or a conf built in another order) is the same state.
    state = busy_sim().state
    reordered = json.loads(json.dumps(state.snapshot(), sort_keys=True))
    restored = SchedulerState.restore(reordered)
    assert restored.digest() == state.digest() == restored.recompute_digest()


def test_snapshot_then_restore_then_continue_equals_continuing() -> None:
    sim = busy_sim()
    twin = Sim()
    twin.state = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    twin.index, twin.requests = sim.index, sim.requests
    for s in (sim, twin):
        s.apply(c.SetPaused(request_id="u", now=at(20), dag_id="d", paused=False))
        grants = s.lease(n=10, now=at(21))
        for g in grants:
            s.complete(g, success=False, now=at(22))
        s.apply(
            c.QueueTasks(request_id="q2", now=at(500), items=tuple(s.state.ready_to_queue(at(500))))
        )
        s.lease(n=10, now=at(501))
    assert twin.state.snapshot() == sim.state.snapshot()
    assert twin.state.digest() == sim.state.digest()


def test_newer_snapshot_is_refused() -> None:
    snap = SchedulerState().snapshot()
    snap["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(SnapshotVersionError) as err:
        SchedulerState.restore(snap)
    assert err.value.found == SCHEMA_VERSION + 1 and "upgrade raftsched" in str(err.value)
    with pytest.raises(ValueError, match="schema_version"):
        SchedulerState.restore({})


def test_a_version_1_snapshot_still_restores() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    sim.create("d")
    snap = sim.state.snapshot()
    for key in ("halted", "clock", "evicted_slots", "fences"):
        del snap[key]
    snap["schema_version"] = 1
    restored = SchedulerState.restore(snap)
    assert restored.run("d", run_id()) is not None and restored.halted is None


def test_digest_tracks_state() -> None:
    a, b = Sim(), Sim()
    assert a.state.digest() == b.state.digest()
    a.register(dag("d", task("a")))
    assert a.state.digest() != b.state.digest()
    b.register(dag("d", task("a")))
    assert a.state.digest() == b.state.digest()
    a.create("d")
    b.create("d", T0 + timedelta(days=1))
    assert a.state.digest() != b.state.digest()
    assert a.state.digest() == a.state.recompute_digest()


def _ack_all(sim: Sim, now_s: float, request_id: str) -> int:
    ack = c.AckMaterialized(
        request_id=request_id,
        now=at(now_s),
        seq=sim.state.outbox_last_seq,
        finished_run_retention_seconds=0,
    )
    return int(sim.apply(ack).value)


def test_a_manual_run_on_a_slot_the_scheduler_has_yet_to_reach_stays_until_it_does() -> None:
    """A run triggered for a future slot's logical date: if it left memory, the scheduler
    would create a second run for that slot later, which the DB (unique dag_id +
    logical_date) would refuse, stopping the materializer for good."""
    sim = Sim()
    sim.register(dag("d", task("a")))  # daily at midnight UTC
    ahead = T0 + timedelta(days=2)
    assert sim.create("d", ahead, run_type=RunType.MANUAL).ok
    sim.run_task("a")
    assert sim.run("d", run_id(ahead, "manual")).state == "success"
    assert _ack_all(sim, 10, "a1") == 0
    assert sim.state.run("d", run_id(ahead, "manual")) is not None

    created = [sim.create("d", T0 + timedelta(days=day)).value[0] for day in range(3)]
    assert [item.ok for item in created] == [True, True, False]
    assert created[2].reason == r.RUN_EXISTS  # the slot is taken by the manual run
    assert sim.state.last_logical_date("d") == ahead
    assert _ack_all(sim, 20, "a2") == 1  # now the scheduler is past it: it may go
    assert sim.state.run("d", run_id(ahead, "manual")) is None
    assert sim.state.digest() == sim.state.recompute_digest()


def test_a_manual_run_off_the_schedule_leaves_memory_as_usual() -> None:
    sim = Sim()
    sim.register(dag("d", task("a")))
    off_slot = T0 + timedelta(days=2, hours=5)
    assert sim.create("d", off_slot, run_type=RunType.MANUAL).ok
    sim.run_task("a")
    assert _ack_all(sim, 10, "a1") == 1


def test_a_held_run_is_evicted_at_the_same_ack_on_a_replica_restored_meanwhile() -> None:
    """Parking is derived state: a replica restored from a snapshot while a run is parked
    evicts it at the same command as one that was never restarted."""
    sim = Sim()
    sim.register(dag("d", task("a")))
    ahead = T0 + timedelta(days=2)
    sim.create("d", ahead, run_type=RunType.MANUAL)
    sim.run_task("a")
    assert _ack_all(sim, 10, "a1") == 0  # parked on the live replica
    restored = SchedulerState.restore(sim.state.snapshot())
    for day in range(3):
        cmd = c.CreateRuns(
            request_id=f"s{day}",
            now=T0,
            runs=(c.RunDecision("d", T0 + timedelta(days=day), T0, T0 + timedelta(days=day)),),
        )
        sim.apply(cmd)
        restored.apply(cmd, log_index=sim.index)
    ack = c.AckMaterialized(
        request_id="a2", now=at(20), seq=sim.state.outbox_last_seq, finished_run_retention_seconds=0
    )
    assert sim.apply(ack).value == 1
    assert restored.apply(ack, log_index=sim.index).value == 1
    assert restored.digest() == sim.state.digest()


def test_settle_live_runs_queues_what_a_restored_state_left_waiting() -> None:
    """``store rebuild`` restores a state whose ready tasks may not be queued yet:
    settle_live_runs queues them as apply would have, with their outbox rows."""
    sim = Sim()
    sim.register(dag("d", task("a"), task("b", "a")))
    sim.create("d")
    data = json.loads(json.dumps(sim.state.snapshot()))
    [ti] = [t for t in data["runs"][0]["tis"] if t["task_id"] == "a"]
    ti.update(state="none", queued_at=None)  # as if the row that queued it was lost
    state = SchedulerState.restore(data)
    assert state.queued_count == 0
    assert state.settle_live_runs(at(5)) == 1  # one TASK_INSTANCE row: "a" queued
    assert state.queued_count == 1
    assert state.recompute_digest() == state.digest()
    assert state.settle_live_runs(at(6)) == 0  # nothing left to settle
