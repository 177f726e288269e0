"""A chain's next step is leased in its upstream's commit round (issue #11).

- CompleteBatch's ``next``: the LeaseTasks rides in the outcomes' entry, after them, so it
  grants the task the success queued; its request id is ``next.request_id#0``, so a Lease
  replayed with ``next.request_id`` (the death report) returns the same grants.
- A long poll that finds nothing queued for it rides at once (no LeaseTasks of its own, no
  entry), and still gets the task an outcome queues; a poll whose first LeaseTasks was already
  applied (a retry) proposes as before and gets its grants back at once.
- The worker's OutcomeBatcher asks for its outcomes' slots and starts what they granted.

The servicers run over a real SchedulerState (test_api_bounds' stand-ins for the node and the
proposer), as in test_batch_worker_calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from test_batch_worker_calls import (
    WAIT,
    Call,
    GatedApi,
    gated_api,
    in_threads,
    lease,
    trigger,
    wait_until,
)
from test_worker_complete_batch import _outcome
from test_worker_loop import FakeTransport
from test_worker_loop import task as worker_task

from raftsched.api.gen import common_pb2, worker_pb2
from raftsched.core import commands as c
from raftsched.core.model import TaskKey
from raftsched.errors import NoQuorumError
from raftsched.worker.loop import Worker, WorkerSettings
from raftsched.worker.reports import OutcomeBatcher


@pytest.fixture
def api(sqlite_url: str) -> Iterator[GatedApi]:
    yield from gated_api(sqlite_url)


def _complete_and_lease(api: GatedApi, grant: Any, lease_id: str, more: int = 1) -> Any:
    request = worker_pb2.CompleteBatchRequest(
        worker_id="w1",
        outcomes=[_outcome(grant, f"o-{grant.key.task_id}")],
        next=worker_pb2.LeaseRequest(worker_id="w1", max_tasks=more, request_id=lease_id),
    )
    return api.workers.CompleteBatch(request, Call())


def test_an_outcome_call_leases_the_task_its_success_queues_in_the_same_entry(
    api: GatedApi,
) -> None:
    trigger(api, "d")  # d: t >> u
    (grant,) = lease(api, 1)
    response = _complete_and_lease(api, grant, "next-1")
    assert response.answers[0].state == common_pb2.TASK_STATE_SUCCESS
    assert [g.key.task_id for g in response.leases] == ["u"]
    (batch,) = api.entries(c.Batch)  # one entry: the outcome, then its LeaseTasks
    assert [type(x) for x in batch.commands] == [c.CompleteAttempt, c.LeaseTasks]
    assert batch.commands[1].request_id == "next-1#0"  # open mode: no caller scope
    index = next(i for cmd, i in api.sim.log if cmd is batch)
    assert response.leases[0].token == index  # fenced by that entry's index
    # The death report replays it as a Lease with the same request id: the same grant
    replayed = api.workers.Lease(
        worker_pb2.LeaseRequest(worker_id="w1", max_tasks=1, request_id="next-1"), Call()
    )
    assert [(g.key.task_id, g.token) for g in replayed.leases] == [("u", index)]


def test_an_outcome_call_without_next_leases_nothing(api: GatedApi) -> None:
    trigger(api, "d")
    (grant,) = lease(api, 1)
    request = worker_pb2.CompleteBatchRequest(worker_id="w1", outcomes=[_outcome(grant, "o")])
    response = api.workers.CompleteBatch(request, Call())
    assert response.answers[0].state == common_pb2.TASK_STATE_SUCCESS and not response.leases
    assert not [x for x in api.entries(c.LeaseTasks) if x.request_id.startswith("o")]


def test_a_malformed_next_is_ignored_and_the_outcomes_are_applied(api: GatedApi) -> None:
    trigger(api, "d")
    (grant,) = lease(api, 1)
    request = worker_pb2.CompleteBatchRequest(
        worker_id="w1",
        outcomes=[_outcome(grant, "o")],
        next=worker_pb2.LeaseRequest(worker_id="w2", max_tasks=1, request_id="n"),
    )
    response = api.workers.CompleteBatch(request, Call())
    assert response.answers[0].state == common_pb2.TASK_STATE_SUCCESS  # nothing lost
    assert not response.leases and not [
        x for x in api.entries(c.LeaseTasks) if "n#" in x.request_id
    ]


def _in_contact(api: GatedApi) -> None:
    api.node.last_leader_contact = time.time() + 3600  # type: ignore[attr-defined]


def test_a_poll_with_nothing_queued_rides_at_once_and_gets_what_an_outcome_queues(
    api: GatedApi,
) -> None:
    _in_contact(api)
    trigger(api, "d")  # d: t >> u
    (grant,) = lease(api, 1)
    before = len(api.entries(c.LeaseTasks))
    polls, leased = in_threads(lambda: lease(api, 1, wait=5.0))
    wait_until(lambda: api.workers.batcher._riders)
    assert len(api.entries(c.LeaseTasks)) == before  # it proposed nothing of its own
    request = worker_pb2.CompleteBatchRequest(worker_id="w1", outcomes=[_outcome(grant, "o")])
    api.workers.CompleteBatch(request, Call())
    polls[0].join(WAIT)
    assert len(leased) == 1 and [g.key.task_id for g in leased[0]] == ["u"]
    (batch,) = api.entries(c.Batch)  # the outcome, then the poll's first LeaseTasks
    assert [type(x) for x in batch.commands] == [c.CompleteAttempt, c.LeaseTasks]


def test_a_poll_proposes_first_when_tasks_are_queued_or_the_leader_is_not_heard(
    api: GatedApi,
) -> None:
    trigger(api, "flat")
    _in_contact(api)
    assert len(lease(api, 1, wait=5.0)) == 1  # queued here: proposed and granted at once
    assert len(lease(api, 3)) == 3  # nothing is queued any more
    proposed = len(api.entries(c.LeaseTasks))
    assert lease(api, 1, wait=0.2) == []  # nothing to lease: it only waited
    assert len(api.entries(c.LeaseTasks)) == proposed
    api.node.last_leader_contact = time.time() - 60  # type: ignore[attr-defined]
    assert lease(api, 1, wait=0.2) == []  # cut off, perhaps: it proposes (the worker hears)
    assert len(api.entries(c.LeaseTasks)) == proposed + 1


def test_a_retried_poll_whose_first_lease_was_applied_gets_its_grants_at_once(
    api: GatedApi,
) -> None:
    _in_contact(api)
    trigger(api, "flat")
    first = api.workers.Lease(
        worker_pb2.LeaseRequest(worker_id="w1", max_tasks=4, request_id="poll-1"), Call()
    )
    assert len(first.leases) == 4  # every task of flat: nothing is queued any more
    started = time.monotonic()
    again = api.workers.Lease(
        worker_pb2.LeaseRequest(worker_id="w1", max_tasks=4, wait_seconds=5.0, request_id="poll-1"),
        Call(),
    )
    assert [g.token for g in again.leases] == [g.token for g in first.leases]
    assert time.monotonic() - started < WAIT  # answered, not left to wait out its poll


# -- the worker's side ----------------------------------------------------------------------


class _Transport:
    def __init__(self, grants: list[Any]) -> None:
        self.grants = grants
        self.calls: list[tuple[int, str, int]] = []

    def complete(self, *args: Any, **kwargs: Any) -> bool:  # pragma: no cover - not used
        raise AssertionError("CompleteBatch is there")

    def complete_many(self, reports: Any) -> list[bool]:
        self.calls.append((len(reports), "", 0))
        return [True] * len(reports)

    def complete_and_lease(
        self, reports: Any, request_id: str, max_tasks: int
    ) -> tuple[list[bool], list[Any]]:
        self.calls.append((len(reports), request_id, max_tasks))
        return [True] * len(reports), self.grants


class _Leasing:
    def __init__(self, slots: int) -> None:
        self.free = slots
        self.events: list[tuple[str, Any]] = []

    def slots(self, outcomes: int) -> int:
        return min(outcomes, self.free)

    def sending(self, request_id: str, max_tasks: int) -> None:
        self.events.append(("sending", (request_id, max_tasks)))

    def granted(self, grants: list[Any], sent: float) -> None:
        self.events.append(("granted", list(grants)))


def test_the_worker_asks_for_its_outcomes_slots_and_is_handed_the_grants() -> None:
    transport = _Transport(grants=["next-task"])
    leasing = _Leasing(slots=1)
    batcher = OutcomeBatcher(transport, "w1", leasing=leasing)
    key = TaskKey("d", "r", "t")
    assert batcher.complete(key, 5, success=True, exit_code=0, message="") is True
    ((count, request_id, more),) = transport.calls
    assert (count, more) == (1, 1) and request_id
    assert leasing.events == [("sending", (request_id, 1)), ("granted", ["next-task"])]
    leasing.free = 0  # stopping: no more leases
    assert batcher.complete(key, 6, success=True, exit_code=0, message="") is True
    assert transport.calls[-1] == (1, "", 0)  # complete_many: nothing asked


def test_an_unanswered_calls_lease_is_asked_again_with_its_request_id() -> None:
    """The call may have committed: the next one asks for the same lease (same request id,
    so the cluster answers it with those grants) and counts its fence from the first send."""

    class FailingOnce(_Transport):
        first_call_at = 0.0

        def complete_and_lease(self, reports: Any, request_id: str, max_tasks: int) -> Any:
            if not self.calls:
                self.calls.append((len(reports), request_id, max_tasks))
                self.first_call_at = time.monotonic()
                raise grpc.RpcError("unavailable")
            return super().complete_and_lease(reports, request_id, max_tasks)

    class Timed(_Leasing):
        def granted(self, grants: list[Any], sent: float) -> None:
            self.events.append(("granted", (list(grants), sent)))

    transport = FailingOnce(grants=["next-task"])
    leasing = Timed(slots=1)
    batcher = OutcomeBatcher(transport, "w1", leasing=leasing)
    key = TaskKey("d", "r", "t")
    before = time.monotonic()
    with pytest.raises(grpc.RpcError):
        batcher.complete(key, 5, success=True, exit_code=0, message="")
    assert [e[0] for e in leasing.events] == ["sending"]  # the slot still names it
    leasing.free = 0  # no slot now: the lease in doubt is asked again all the same
    assert batcher.complete(key, 5, success=True, exit_code=0, message="") is True
    (_, first, more), (_, again, more_again) = transport.calls
    assert again == first and more == more_again == 1
    (_, (grants, sent)) = leasing.events[-1]
    assert grants == ["next-task"] and before <= sent <= transport.first_call_at
    assert batcher.complete(key, 6, success=True, exit_code=0, message="") is True
    assert transport.calls[-1] == (1, "", 0)  # answered: nothing in doubt any more


# -- a real Worker over a transport whose outcome calls lease --------------------------------


class _LeasingTransport(FakeTransport):
    """FakeTransport with CompleteBatch and ``next``: each call completes its outcomes, then
    takes up to ``max_tasks`` offered tasks, as the cluster's LeaseTasks after them would."""

    def __init__(self) -> None:
        super().__init__()
        self.granted_with_outcomes: list[TaskKey] = []
        self.chain: list[Any] = []  # steps queued one by one, each by the outcome before it
        self.delay = 0.0  # seconds each outcome call takes
        self.peak = 0  # most leases out at once (leased, not completed)

    def complete_many(self, reports: Any) -> list[Any]:
        return self.complete_and_lease(reports, "", 0)[0]

    def answer(self, report: Any) -> Any:
        """One outcome's answer (True, False or the error its own call would raise)."""
        r = report
        return self.complete(
            r.key, r.token, success=r.success, exit_code=r.exit_code, message=r.message
        )

    def complete_and_lease(
        self, reports: Any, request_id: str, max_tasks: int
    ) -> tuple[list[Any], list[Any]]:
        time.sleep(self.delay)
        with self.cond:  # one step, as one Raft entry: nothing else leases in between
            answers = [self.answer(r) for r in reports]
            if self.chain:  # a success queues the next step of the chain
                self.queue.extend(self.chain[: len(reports)])
                del self.chain[: len(reports)]
            taken, self.queue = self.queue[:max_tasks], self.queue[max_tasks:]
            self.outstanding.update(a.key for a in taken)
            self.peak = max(self.peak, len(self.outstanding))
            self.granted_with_outcomes.extend(a.key for a in taken)
            self.cond.notify_all()
        return answers, taken


@pytest.mark.parametrize("noop", [False, True])
def test_a_worker_starts_what_its_outcome_calls_lease(noop: bool) -> None:
    """A chain, one slot: the poll leases the first step; each outcome's call leases the next
    one (its success queued it), which starts as a polled one would. A noop worker's too:
    its outcome of that task is not waited for on the thread that sends outcomes (which
    would wait for itself)."""
    transport = _LeasingTransport()
    settings = WorkerSettings(concurrency=1, heartbeat_interval=0.1, lease_wait=0.1, noop=noop)
    worker = Worker(transport, settings, worker_id="w1")  # type: ignore[arg-type]
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        tasks = [worker_task(f"s{i}", "true") for i in range(5)]
        transport.chain = tasks[1:]
        transport.offer(tasks[0])
        assert transport.wait_for(lambda: len(transport.completed) == 5)
        assert all(transport.completed[t.key][0] for t in tasks)
        assert transport.granted_with_outcomes  # not every one came from the poll
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive(), "the worker did not stop"


class _FlakyOutcomes(_LeasingTransport):
    """The outcome of s0 is unanswered twice (a per-outcome UNAVAILABLE): the worker retries
    it while the task its call leased runs."""

    def __init__(self) -> None:
        super().__init__()
        self.unanswered = 2

    def answer(self, report: Any) -> Any:
        if report.key.task_id == "s0" and self.unanswered:
            self.unanswered -= 1
            return NoQuorumError("no quorum (fake)")
        return super().answer(report)


def test_an_outcome_retried_does_not_lease_its_slot_again() -> None:
    transport = _FlakyOutcomes()
    settings = WorkerSettings(concurrency=1, heartbeat_interval=0.1, lease_wait=0.1)
    worker = Worker(transport, settings, worker_id="w1")  # type: ignore[arg-type]
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        tasks = [worker_task(f"s{i}", "sleep 0.3") for i in range(4)]
        transport.offer(*tasks)
        assert transport.wait_for(lambda: len(transport.completed) == 4, timeout=30)
    finally:
        worker.stop()
        thread.join(30)
    # s0's slot went to s1 once; its retries asked for nothing more (one slot: s0, in doubt,
    # and s1 at most)
    assert transport.peak <= 2, transport.peak


def test_a_noop_worker_sends_its_last_outcomes_before_it_stops() -> None:
    transport = _LeasingTransport()
    transport.delay = 0.2  # outcomes still wait to be sent when it stops
    settings = WorkerSettings(concurrency=4, heartbeat_interval=0.1, lease_wait=0.1, noop=True)
    worker = Worker(transport, settings, worker_id="w1")  # type: ignore[arg-type]
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    tasks = [worker_task(f"n{i}", "true") for i in range(40)]
    transport.offer(*tasks)
    assert transport.wait_for(lambda: len(worker.arrivals) >= 1)
    worker.stop()
    thread.join(30)
    assert not thread.is_alive()
    leased = {a.key for a, _ in worker.arrivals}
    assert leased <= set(transport.completed)  # every task it was handed was reported
