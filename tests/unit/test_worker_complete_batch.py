"""Outcomes that end together go out in one CompleteBatch call (issue #11).

- The servicer (api/servicers/worker_reports.py) over a real SchedulerState: each outcome is
  its own command in one entry and gets its own answer (a stale token and a value past a
  bound are refused alone); a retried call is answered with the first results.
- The transport (worker/grpc_transport.py) against a scripted WorkerService: the answers'
  mapping, and None (fall back) from a server without CompleteBatch.
- The worker's group commit (worker/reports.py): outcomes gather behind a call in flight,
  each caller gets its own answer, a cluster without CompleteBatch gets Complete calls with
  the same request ids.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from test_batch_worker_calls import WAIT, Call, GatedApi, gated_api, in_threads, lease, tis, trigger

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import common_pb2, worker_pb2, worker_pb2_grpc
from raftsched.core import commands as c
from raftsched.core.model import TaskKey
from raftsched.errors import ApiError
from raftsched.worker.grpc_transport import GrpcWorkerTransport
from raftsched.worker.reports import BUSY_RUNNING, OutcomeBatcher, Report, outcome_request_id

KEY = TaskKey("etl", "manual__1", "load")
STALE = 99


@pytest.fixture
def api(sqlite_url: str) -> Iterator[GatedApi]:
    yield from gated_api(sqlite_url)


def _outcome(grant: Any, request_id: str, **fields: Any) -> Any:
    k = grant.key
    return worker_pb2.CompleteRequest(
        worker_id="w1",
        key=common_pb2.TaskKey(dag_id=k.dag_id, run_id=k.run_id, task_id=k.task_id),
        token=fields.pop("token", grant.token),
        success=True,
        exit_code=0,
        request_id=request_id,
        **fields,
    )


# -- the servicer --------------------------------------------------------------------------


def test_each_outcome_of_a_batch_is_its_own_command_in_one_entry(api: GatedApi) -> None:
    trigger(api, "flat")
    grants = lease(api, 4)
    outcomes = [
        _outcome(grants[0], "b-0"),
        _outcome(grants[1], "b-1", token=grants[1].token + 1000),  # not this lease's token
        _outcome(grants[2], "b-2", result_json="{not json"),  # refused: invalid
        _outcome(grants[3], "b-3"),
    ]
    request = worker_pb2.CompleteBatchRequest(worker_id="w1", outcomes=outcomes)
    answers = list(api.workers.CompleteBatch(request, Call()).answers)
    codes = [grpc.StatusCode.OK.value[0], grpc.StatusCode.FAILED_PRECONDITION.value[0]]
    codes.append(grpc.StatusCode.INVALID_ARGUMENT.value[0])
    assert [a.code for a in answers] == [codes[0], codes[1], codes[2], codes[0]]
    assert answers[0].state == answers[3].state == common_pb2.TASK_STATE_SUCCESS
    assert "result_json" in answers[2].message and answers[1].message
    (batch,) = api.entries(c.Batch)  # the two valid outcomes and the stale one: one entry
    # (a request id may carry a caller scope prefix: "<scope>:b-0")
    assert [x.request_id.rpartition(":")[2] for x in batch.commands] == ["b-0", "b-1", "b-3"]
    states = {ti.key.task_id: str(ti.state) for ti in tis(api, "flat")}
    assert states[grants[0].key.task_id] == states[grants[3].key.task_id] == "success"
    assert states[grants[1].key.task_id] != "success"
    # the same call again (a retry): the first answers, nothing applied twice
    again = list(api.workers.CompleteBatch(request, Call()).answers)
    assert [a.code for a in again] == [a.code for a in answers]
    assert all(ti.try_number == 1 for ti in tis(api, "flat"))


def test_a_batch_past_its_bound_is_refused_as_a_whole(api: GatedApi) -> None:
    from test_api_bounds import Aborted

    from raftsched.api.servicers.worker_reports import MAX_OUTCOMES

    trigger(api, "flat")
    (grant,) = lease(api, 1)
    outcomes = [_outcome(grant, f"x-{i}") for i in range(MAX_OUTCOMES + 1)]
    request = worker_pb2.CompleteBatchRequest(worker_id="w1", outcomes=outcomes)
    with pytest.raises(Aborted) as err:
        api.workers.CompleteBatch(request, Call())
    assert "INVALID_ARGUMENT" in str(err.value)
    assert not api.entries(c.CompleteAttempt) and not api.entries(c.Batch)


# -- the transport -------------------------------------------------------------------------


class Scripted(worker_pb2_grpc.WorkerServiceServicer):
    """CompleteBatch as a server with it answers (or UNIMPLEMENTED / PERMISSION_DENIED)."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.batch_status: grpc.StatusCode | None = None  # abort CompleteBatch with it

    def CompleteBatch(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        if self.batch_status is not None:
            context.abort(self.batch_status, "no CompleteBatch here")
        answers = []
        for outcome in request.outcomes:
            if outcome.token == STALE:
                code = grpc.StatusCode.FAILED_PRECONDITION
            elif outcome.message == "unanswered":
                code = grpc.StatusCode.DEADLINE_EXCEEDED
            else:
                code = grpc.StatusCode.OK
            answers.append(worker_pb2.CompleteAnswer(code=code.value[0], message=code.name))
        return worker_pb2.CompleteBatchResponse(answers=answers)

    def Complete(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        if request.token == STALE:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stale fencing token")
        return worker_pb2.CompleteResponse()


@contextmanager
def _serving(register: Callable[[grpc.Server], None]) -> Iterator[GrpcWorkerTransport]:
    """A worker transport talking to a real gRPC server that ``register`` gave handlers."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = RaftschedClient([f"127.0.0.1:{port}"], deadline=5.0)
    try:
        yield GrpcWorkerTransport(client, worker_id="w1")
    finally:
        client.close()
        server.stop(0)


@pytest.fixture
def served() -> Iterator[tuple[Scripted, GrpcWorkerTransport]]:
    servicer = Scripted()
    with _serving(
        lambda server: worker_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, server)
    ) as transport:
        yield servicer, transport


def _report(token: int, message: str = "", **fields: Any) -> Report:
    return Report(KEY, token, True, 0, message, f"rid-{token}-{message}", **fields)


def test_the_transport_maps_each_answer(served: tuple[Scripted, GrpcWorkerTransport]) -> None:
    servicer, transport = served
    reports = [_report(41, result_json='{"a": 1}'), _report(STALE), _report(42, "unanswered")]
    answers = transport.complete_many(reports)
    assert answers is not None and answers[:2] == [True, False]
    assert isinstance(answers[2], ApiError) and answers[2].code.name == "DEADLINE_EXCEEDED"
    (sent,) = servicer.requests
    assert [o.request_id for o in sent.outcomes] == [r.request_id for r in reports]
    assert sent.outcomes[0].result_json == '{"a": 1}' and sent.outcomes[0].worker_id == "w1"


@pytest.fixture
def old_server() -> Iterator[tuple[Scripted, GrpcWorkerTransport]]:
    """A server of an older release: WorkerService without CompleteBatch (gRPC itself
    answers UNIMPLEMENTED for a method it has no handler for)."""
    servicer = Scripted()
    handlers = {
        "Complete": grpc.unary_unary_rpc_method_handler(
            servicer.Complete,
            request_deserializer=worker_pb2.CompleteRequest.FromString,
            response_serializer=worker_pb2.CompleteResponse.SerializeToString,
        )
    }
    generic = grpc.method_handlers_generic_handler("raftsched.v1.WorkerService", handlers)
    with _serving(lambda server: server.add_generic_rpc_handlers((generic,))) as transport:
        yield servicer, transport


def test_an_older_server_gets_complete_calls_with_the_same_ids(
    old_server: tuple[Scripted, GrpcWorkerTransport],
) -> None:
    servicer, transport = old_server
    assert transport.complete_many([_report(41)]) is None  # UNIMPLEMENTED: not an error
    batcher = OutcomeBatcher(transport, "w1")
    assert batcher.complete(KEY, 41, success=True, exit_code=0, message="")
    assert not batcher.complete(KEY, STALE, success=True, exit_code=0, message="")
    assert batcher.calls == 1  # asked once; then Complete calls only
    assert [r.request_id for r in servicer.requests] == [
        outcome_request_id("w1", KEY, 41),
        outcome_request_id("w1", KEY, STALE),
    ]


def test_permission_denied_on_complete_batch_falls_back(
    served: tuple[Scripted, GrpcWorkerTransport],
) -> None:
    """An older server's token check takes an unknown method for an admin's: not a reason
    for the worker to stop, only to send Complete calls."""
    servicer, transport = served
    servicer.batch_status = grpc.StatusCode.PERMISSION_DENIED
    assert transport.complete_many([_report(41)]) is None


# -- the worker's group commit -------------------------------------------------------------


class Gated:
    """A transport whose complete_many holds each call until ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.calls: list[list[Report]] = []
        self.unsupported = False
        self.singles: list[tuple[int, str]] = []

    def complete_many(self, reports: list[Report]) -> list[Any] | None:
        self.calls.append(list(reports))
        assert self.gate.wait(WAIT)
        if self.unsupported:
            return None
        out: list[Any] = []
        for r in reports:
            if r.token == STALE:
                out.append(False)
            elif r.message == "unanswered":
                out.append(ApiError(grpc.StatusCode.UNAVAILABLE, "no quorum"))
            else:
                out.append(True)
        return out

    def complete(self, key: TaskKey, token: int, *, request_id: str = "", **_: Any) -> bool:
        self.singles.append((token, request_id))
        return token != STALE


def _wait_until(predicate: Any) -> None:
    import time

    end = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < end, "gave up waiting"
        time.sleep(0.005)


def test_outcomes_gather_behind_a_call_in_flight_and_each_gets_its_own_answer() -> None:
    transport = Gated()
    batcher = OutcomeBatcher(transport, "w1")

    def report(token: int, message: str = "") -> Any:
        try:
            return batcher.complete(
                TaskKey("d", "r", f"t{token}"),
                token,
                success=True,
                exit_code=0,
                message=message,
            )
        except ApiError as err:
            return err

    first, answers = in_threads(lambda: report(1))
    _wait_until(lambda: transport.calls)  # the first call is in flight...
    rest, more = in_threads(
        lambda: report(2), lambda: report(STALE), lambda: report(3, "unanswered")
    )
    _wait_until(lambda: len(batcher._waiting) == 3)  # ...the others wait for the next one
    transport.gate.set()
    for t in first + rest:
        t.join(WAIT)
    assert answers == [True] and len(more) == 3
    assert True in more and False in more
    assert any(isinstance(a, ApiError) and a.code.name == "UNAVAILABLE" for a in more)
    assert [len(call) for call in transport.calls] == [1, 3]
    # a retry of an outcome carries its first request id
    ids = {r.token: r.request_id for call in transport.calls for r in call}
    assert report(3) is True
    assert (
        transport.calls[-1][0].request_id
        == ids[3]
        == outcome_request_id("w1", TaskKey("d", "r", "t3"), 3)
    )


def test_a_cluster_without_complete_batch_is_sent_complete_calls_for_a_while() -> None:
    transport = Gated()
    transport.unsupported = True
    transport.gate.set()
    batcher = OutcomeBatcher(transport, "w1")
    assert batcher.complete(KEY, 41, success=True, exit_code=0, message="")
    assert not batcher.complete(KEY, STALE, success=True, exit_code=0, message="")
    assert len(transport.calls) == 1  # asked once; then Complete calls only
    assert transport.singles == [
        (41, outcome_request_id("w1", KEY, 41)),
        (STALE, outcome_request_id("w1", KEY, STALE)),
    ]


def test_a_transport_without_complete_many_is_called_as_before() -> None:
    class Plain:
        def __init__(self) -> None:
            self.seen: list[dict[str, Any]] = []

        def complete(self, key: TaskKey, token: int, **fields: Any) -> bool:
            self.seen.append(fields)
            return True

    plain = Plain()
    batcher = OutcomeBatcher(plain, "w1")
    assert batcher.complete(KEY, 41, success=True, exit_code=0, message="ok", follow=["x"])
    assert plain.seen == [{"success": True, "exit_code": 0, "message": "ok", "follow": ["x"]}]


def test_a_busy_worker_sends_a_burst_of_outcomes_as_one_call() -> None:
    """With BUSY_RUNNING attempts under way the sender waits (here up to WAIT) until each has
    handed its outcome over: one call, sent as soon as the last arrived."""
    transport = Gated()
    transport.gate.set()
    running = list(range(BUSY_RUNNING))
    batcher = OutcomeBatcher(transport, "w1", running, linger=WAIT)
    keys = [TaskKey("d", "r", f"t{i}") for i in running]
    threads, answers = in_threads(
        *(lambda k=k: batcher.complete(k, 7, success=True, exit_code=0, message="") for k in keys)
    )
    for t in threads:
        t.join(WAIT)
    assert answers == [True] * BUSY_RUNNING
    assert [len(call) for call in transport.calls] == [BUSY_RUNNING]
