"""GetTaskLog with follow on a replica that lags behind the DB.

Any node serves any call, so a client may trigger a run on one node and follow its log on
another that has not applied the trigger yet, while the leader has already written the run's
rows to the DB. The follow must wait for the attempt, not end at once with nothing.

The servicer is the real one, over a real SchedulerState and a real migrated DB; only the Raft
node is a stand-in that reads whichever state the test says this replica has applied.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import grpc
import pytest
from sqlalchemy.engine import Engine
from test_state_harness import T0, Sim, dag, run_id, task

from raftsched.api.gen import dag_pb2
from raftsched.api.servicers import dags as dag_servicer
from raftsched.api.servicers import task_logs
from raftsched.api.servicers.context import ApiContext
from raftsched.core import commands as c
from raftsched.core.model import TaskKey
from raftsched.core.state import SchedulerState
from raftsched.store.materializer import Materializer

EXTRACT = TaskKey("d", run_id(), "extract")


class ReplicaNode:
    """The parts of SchedulerNode the DagService reads, over a state the test swaps."""

    def __init__(self, state: SchedulerState) -> None:
        self.state = state
        self.lock = threading.Lock()
        self.leader_address = "leader:1"

    def read(self, fn: Callable[[SchedulerState], Any]) -> Any:
        with self.lock:
            return fn(self.state)

    @property
    def settings(self) -> Any:
        return type("Settings", (), {"self_address": "replica:1"})()


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code


class Context:
    """A live call (gRPC's ServicerContext, as much as GetTaskLog uses)."""

    def is_active(self) -> bool:
        return True

    def code(self) -> grpc.StatusCode | None:
        return None

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def servicer(node: ReplicaNode, engine: Engine) -> dag_servicer.DagServicer:
    ctx = ApiContext(node=node, proposer=None, api=None, engine=engine)  # type: ignore[arg-type]
    return dag_servicer.DagServicer(ctx)


def materialize(sim: Sim, engine: Engine) -> None:
    materializer = Materializer(engine)
    entries = sim.state.outbox_after(materializer.watermark(), 1_000_000)
    acked = materializer.write(entries)
    sim.apply(c.AckMaterialized(request_id=sim.rid(), now=T0, seq=acked))


def leader_with_run() -> tuple[Sim, Sim]:
    """(leader, lagging replica): both registered the DAG; only the leader created the run."""
    spec = dag("d", task("extract"))
    leader, replica = Sim(), Sim()
    leader.register(spec)
    replica.register(spec)
    leader.create("d")
    return leader, replica


def run_extract(leader: Sim) -> None:
    (grant,) = leader.lease(now=T0 + timedelta(seconds=1))
    assert leader.append_logs(grant, ("stdout", "extract-1\n"), ("stderr", "warn\n")).ok
    assert leader.complete(grant).ok


def follow(svc: dag_servicer.DagServicer, out: list[str]) -> None:
    request = dag_pb2.GetTaskLogRequest(
        dag_id=EXTRACT.dag_id, run_id=EXTRACT.run_id, task_id=EXTRACT.task_id, follow=True
    )
    out.extend(chunk.text for chunk in svc.GetTaskLog(request, Context()))


def test_follow_waits_while_the_replica_lags_and_while_the_attempt_is_queued(
    db_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_logs, "FOLLOW_INTERVAL", 0.02)
    leader, replica = leader_with_run()
    materialize(leader, db_engine)  # the DB has the run and its queued first attempt
    node = ReplicaNode(replica.state)
    followed: list[str] = []
    follower = threading.Thread(target=follow, args=(servicer(node, db_engine), followed))
    follower.start()
    try:
        follower.join(timeout=0.5)
        assert follower.is_alive(), f"ended while the replica lagged: {followed!r}"
        with node.lock:  # the replica catches up: the attempt is queued, no worker has it yet
            node.state = leader.state
        follower.join(timeout=0.5)
        assert follower.is_alive(), f"ended while the attempt was queued: {followed!r}"
        with node.lock:
            run_extract(leader)
            materialize(leader, db_engine)
    finally:
        follower.join(timeout=30)
    assert not follower.is_alive(), "the follow did not end once the attempt finished"
    assert "".join(followed) == "extract-1\nwarn\n"


def test_follow_of_an_attempt_the_replica_forgot_ends_with_the_db_log(
    db_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica that never saw the run (or dropped it after retention): the DB says the
    attempt finished, so the follow returns its log and ends."""
    monkeypatch.setattr(task_logs, "FOLLOW_INTERVAL", 0.02)
    leader, replica = leader_with_run()
    run_extract(leader)
    materialize(leader, db_engine)
    followed: list[str] = []
    follow(servicer(ReplicaNode(replica.state), db_engine), followed)
    assert "".join(followed) == "extract-1\nwarn\n"


def test_follow_of_an_unknown_task_is_not_found_after_a_short_wait(
    db_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_logs, "REPLICA_CATCH_UP_SEC", 0.1)
    _, replica = leader_with_run()
    with pytest.raises(Aborted) as raised:
        follow(servicer(ReplicaNode(replica.state), db_engine), [])
    assert raised.value.code is grpc.StatusCode.NOT_FOUND
    assert "never ran" in str(raised.value)


def test_the_log_of_a_task_up_for_retry_is_its_failed_attempts(
    db_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the empty attempt still to come: plain and followed, it ends after attempt 1."""
    monkeypatch.setattr(task_logs, "FOLLOW_INTERVAL", 0.02)
    sim = Sim()
    sim.register(dag("d", task("extract", retries=1, retry_delay_seconds=3600)))
    sim.create("d")
    (grant,) = sim.lease(now=T0)
    assert sim.append_logs(grant, ("stdout", "try-1\n")).ok
    assert sim.complete(grant, success=False).ok
    assert sim.ti("extract").state == "up_for_retry"
    materialize(sim, db_engine)
    svc = servicer(ReplicaNode(sim.state), db_engine)
    for follow_it in (False, True):
        request = dag_pb2.GetTaskLogRequest(
            dag_id="d", run_id=run_id(), task_id="extract", follow=follow_it
        )
        chunks = list(svc.GetTaskLog(request, Context()))
        assert "".join(c.text for c in chunks) == "try-1\n"
        assert {c.try_number for c in chunks} == {1}
