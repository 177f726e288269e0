"""Workers' calls that arrive together share one Raft entry (api/servicers/worker_batch.py).

The servicers run over a real SchedulerState (test_api_bounds' stand-ins for the node and the
proposer); the entries proposed are read back from the proposer. A gate holds the first entry
in flight, so which calls gather behind it is decided by the test, not by timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_api_bounds import Api, Context
from test_state_harness import dag, task

from raftsched.api.gen import common_pb2, dag_pb2, worker_pb2
from raftsched.api.servicers.worker_batch import CommandBatcher
from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.errors import RaftschedError
from raftsched.store.engine import create_engine_for
from raftsched.store.migrate import init_db

WAIT = 10.0  # seconds any step may take before the test gives up (never a timing assertion)


class Call(Context):
    def time_remaining(self) -> float | None:
        return 30.0


class GatedApi(Api):
    """Api whose proposer holds each entry until ``gate`` is set (while ``hold``)."""

    def __init__(self, engine: Any) -> None:
        super().__init__(engine)
        self.hold = False
        self.gate = threading.Event()
        self.refuse_batches = False
        self.held: list[c.Command] = []  # every command handed to the proposer, held or not
        proposer, original = self.proposer, self.proposer.propose

        def propose(command: c.Command, deadline: float | None = None) -> r.Result:
            self.held.append(command)
            if self.hold:
                assert self.gate.wait(WAIT)
            if self.refuse_batches and isinstance(command, c.Batch):
                proposer.proposed.append(command)
                raise RaftschedError("command refused by the cluster")  # REQUEST_DENIED
            return original(command, deadline)

        proposer.propose = propose  # type: ignore[method-assign]
        self.workers.batcher = CommandBatcher(self.ctx, threads=1)

    def entries(self, kind: type) -> list[c.Command]:
        return [x for x in self.proposer.proposed if isinstance(x, kind)]


def gated_api(sqlite_url: str) -> Iterator[GatedApi]:
    """A GatedApi on a fresh SQLite DB with DAG "flat" (4 independent tasks) registered: the
    body of the ``api`` fixture of this module and of the modules that import it."""
    engine = create_engine_for(sqlite_url)
    init_db(engine)
    instance = GatedApi(engine)
    instance.sim.register(dag("flat", *(task(f"t{i}") for i in range(4))))
    try:
        yield instance
    finally:
        instance.close()
        engine.dispose()


@pytest.fixture
def api(sqlite_url: str) -> Iterator[GatedApi]:
    yield from gated_api(sqlite_url)


def trigger(api: GatedApi, dag_id: str) -> None:
    _, err = api.call(api.dags.TriggerDag, dag_pb2.TriggerDagRequest(dag_id=dag_id))
    assert err is None


def lease(api: GatedApi, n: int, wait: float = 0.0) -> list[Any]:
    request = worker_pb2.LeaseRequest(worker_id="w1", max_tasks=n, wait_seconds=wait)
    return list(api.workers.Lease(request, Call()).leases)


def complete(api: GatedApi, grant: Any, request_id: str) -> Any:
    request = worker_pb2.CompleteRequest(
        worker_id="w1",
        key=common_pb2.TaskKey(
            dag_id=grant.key.dag_id, run_id=grant.key.run_id, task_id=grant.key.task_id
        ),
        token=grant.token,
        success=True,
        exit_code=0,
        request_id=request_id,
    )
    return api.workers.Complete(request, Call())


def in_threads(*calls: Any) -> tuple[list[threading.Thread], list[Any]]:
    answers: list[Any] = []
    threads = [threading.Thread(target=lambda f=f: answers.append(f()), daemon=True) for f in calls]
    for t in threads:
        t.start()
    return threads, answers


def tis(api: GatedApi, dag_id: str) -> list[Any]:
    (run,) = api.sim.state.runs(dag_id)
    return api.sim.state.task_instances(dag_id, run.run_id)


def wait_until(predicate: Any) -> None:
    end = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < end, "gave up waiting"
        time.sleep(0.005)


def test_outcomes_that_wait_together_go_out_as_one_batch(api: GatedApi) -> None:
    trigger(api, "flat")
    grants = lease(api, 4)
    assert len(grants) == 4
    api.hold = True  # the first outcome's entry stays in flight...
    first, _ = in_threads(lambda: complete(api, grants[0], "done-0"))
    wait_until(lambda: any(isinstance(x, c.CompleteAttempt) for x in api.held))
    rest, answers = in_threads(
        *(lambda g=g, i=i: complete(api, g, f"done-{i}") for i, g in enumerate(grants[1:], 1))
    )
    wait_until(lambda: len(api.workers.batcher._waiting) == 3)  # ...the others gather behind it
    api.gate.set()
    for t in first + rest:
        t.join(WAIT)
    assert len(answers) == 3 and all(a.state == common_pb2.TASK_STATE_SUCCESS for a in answers)
    batches = api.entries(c.Batch)
    assert len(batches) == 1 and len(batches[0].commands) == 3
    assert {x.request_id for x in batches[0].commands} == {"done-1", "done-2", "done-3"}
    assert {str(ti.state) for ti in tis(api, "flat")} == {"success"}
    # a worker's retry of an outcome that went out in a batch: its first answer, applied once
    # (on a thread of its own, as gRPC calls come: the request ids are the callers' alone)
    retry, again = in_threads(lambda: complete(api, grants[2], "done-2"))
    retry[0].join(WAIT)
    assert again and again[0].state == common_pb2.TASK_STATE_SUCCESS
    assert all(ti.try_number == 1 for ti in tis(api, "flat"))


def test_a_waiting_poll_rides_with_the_outcome_that_queues_its_task(api: GatedApi) -> None:
    trigger(api, "d")  # d: t >> u
    (grant,) = lease(api, 1)
    assert grant.key.task_id == "t"
    polls, leased = in_threads(lambda: lease(api, 1, wait=5.0))
    wait_until(lambda: api.workers.batcher._riders)  # nothing queued: the poll waits
    assert complete(api, grant, "done-t").state == common_pb2.TASK_STATE_SUCCESS
    polls[0].join(WAIT)
    assert len(leased) == 1 and [g.key.task_id for g in leased[0]] == ["u"]
    (batch,) = api.entries(c.Batch)  # one entry: the outcome, then the poll's LeaseTasks
    assert [type(x) for x in batch.commands] == [c.CompleteAttempt, c.LeaseTasks]
    index = next(i for cmd, i in api.sim.log if cmd is batch)
    assert leased[0][0].token == index  # the lease's fencing token is that entry's index


def test_a_batch_refused_as_a_whole_is_proposed_one_by_one(api: GatedApi) -> None:
    trigger(api, "flat")
    grants = lease(api, 3)
    api.refuse_batches = True
    api.hold = True
    first, _ = in_threads(lambda: complete(api, grants[0], "one-0"))
    wait_until(lambda: any(isinstance(x, c.CompleteAttempt) for x in api.held))
    rest, answers = in_threads(
        lambda: complete(api, grants[1], "one-1"), lambda: complete(api, grants[2], "one-2")
    )
    wait_until(lambda: len(api.workers.batcher._waiting) == 2)
    api.gate.set()
    for t in first + rest:
        t.join(WAIT)
    assert len(answers) == 2 and all(a.state == common_pb2.TASK_STATE_SUCCESS for a in answers)
    assert len(api.entries(c.Batch)) == 1  # refused, then each alone
    assert len(api.entries(c.CompleteAttempt)) == 3
