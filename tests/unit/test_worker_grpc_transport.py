"""GrpcWorkerTransport's message mapping, against a scripted WorkerService on loopback.

Only the translation (messages, refusals, errors) is checked here; the transport against a
real cluster is exercised end to end by the cluster integration tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import common_pb2, worker_pb2, worker_pb2_grpc
from raftsched.core.model import TaskKey
from raftsched.errors import ApiError, WorkerRejected
from raftsched.worker.grpc_transport import GrpcWorkerTransport

KEY = TaskKey("etl", "manual__1", "load")
STALE = 99  # the scripted servicer refuses this token


def _key(key: TaskKey) -> common_pb2.TaskKey:
    return common_pb2.TaskKey(dag_id=key.dag_id, run_id=key.run_id, task_id=key.task_id)


class Scripted(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.reject = False
        self.offers = 1_000_000  # leases to hand out; then Lease waits and answers empty

    def _seen(self, request: Any, context: grpc.ServicerContext) -> None:
        self.requests.append(request)
        if self.reject:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "role viewer may not lease")

    def Lease(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        if self.offers <= 0:  # hold the poll open for its wait, or until the caller goes
            end = time.monotonic() + request.wait_seconds
            while time.monotonic() < end and context.is_active():
                time.sleep(0.02)
            return worker_pb2.LeaseResponse()
        self.offers -= 1
        lease = worker_pb2.TaskLease(
            key=_key(KEY),
            token=41,
            try_number=2,
            kind="python",
            env={"B": "2", "A": "1"},
            callable_name="load",
            kwargs_json='{"rows": 3}',
            fileloc="/dags/etl.py",
            execution_timeout_seconds=60.0,
            conf_json='{"full": true}',
        )
        lease.logical_date.FromDatetime(datetime(2024, 1, 1, tzinfo=UTC))
        lease.data_interval_start.FromDatetime(datetime(2024, 1, 1, tzinfo=UTC))
        lease.data_interval_end.FromDatetime(datetime(2024, 1, 2, tzinfo=UTC))
        return worker_pb2.LeaseResponse(leases=[lease])

    def Heartbeat(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        return worker_pb2.HeartbeatResponse(
            leases=[
                worker_pb2.LeaseStatus(lease=ref, ok=ref.token != STALE) for ref in request.leases
            ]
        )

    def _fenced(self, request: Any, context: grpc.ServicerContext) -> None:
        self._seen(request, context)
        if request.token == STALE:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stale fencing token")

    def Complete(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._fenced(request, context)
        return worker_pb2.CompleteResponse()

    def AppendLogs(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._fenced(request, context)
        return worker_pb2.AppendLogsResponse(last_seq=len(request.chunks))

    def Release(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen(request, context)
        return worker_pb2.ReleaseResponse(released=list(request.leases))


@pytest.fixture
def server() -> Iterator[tuple[Scripted, str]]:
    servicer = Scripted()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


@pytest.fixture
def served(server: tuple[Scripted, str]) -> Iterator[tuple[Scripted, GrpcWorkerTransport]]:
    servicer, address = server
    client = RaftschedClient([address], deadline=5.0)
    try:
        yield servicer, GrpcWorkerTransport(client, lease_ttl=30.0)
    finally:
        client.close()


def test_lease_maps_a_task_lease_to_an_assignment(
    served: tuple[Scripted, GrpcWorkerTransport],
) -> None:
    servicer, transport = served
    (a,) = transport.lease("w1", 3, 0.5)
    request = servicer.requests[-1]
    assert (request.worker_id, request.max_tasks, request.wait_seconds) == ("w1", 3, 0.5)
    assert request.lease_ttl_seconds == 30.0 and request.request_id
    assert (a.key, a.token, a.try_number, a.kind) == (KEY, 41, 2, "python")
    assert a.env == (("A", "1"), ("B", "2"))
    assert (a.callable_name, dict(a.kwargs), a.fileloc) == ("load", {"rows": 3}, "/dags/etl.py")
    assert a.execution_timeout == 60.0
    assert a.logical_date == "2024-01-01T00:00:00+00:00"
    assert a.data_interval_end == "2024-01-02T00:00:00+00:00"
    assert dict(a.conf) == {"full": True}
    assert transport.worker_id == "w1"  # learnt for Complete and AppendLogs


def test_heartbeat_complete_and_logs_map_a_stale_token_to_refused(
    served: tuple[Scripted, GrpcWorkerTransport],
) -> None:
    servicer, transport = served
    transport.worker_id = "w1"
    other = TaskKey("etl", "manual__1", "other")
    assert transport.heartbeat("w1", [(KEY, 41), (other, STALE)]) == {KEY: True, other: False}
    assert transport.append_logs(KEY, 41, [("stdout", "a\n"), ("stderr", "b\n")])
    sent = servicer.requests[-1]
    assert [(c.stream, c.text) for c in sent.chunks] == [("stdout", "a\n"), ("stderr", "b\n")]
    assert sent.worker_id == "w1" and sent.token == 41
    assert not transport.append_logs(KEY, STALE, [("stdout", "x")])
    assert transport.complete(KEY, 41, success=False, exit_code=3, message="disk full")
    sent = servicer.requests[-1]
    assert (sent.success, sent.exit_code, sent.message) == (False, 3, "disk full")
    assert transport.complete(KEY, 41, success=False, exit_code=None, message="could not start")
    assert not servicer.requests[-1].HasField("exit_code")
    assert not transport.complete(KEY, STALE, success=True, exit_code=0, message="")
    transport.release("w1", [(KEY, 41)])
    assert [r.token for r in servicer.requests[-1].leases] == [41]


def test_a_refused_role_raises_worker_rejected(
    served: tuple[Scripted, GrpcWorkerTransport],
) -> None:
    servicer, transport = served
    servicer.reject = True
    with pytest.raises(WorkerRejected, match="PERMISSION_DENIED"):
        transport.lease("w1", 1, 0.1)


def test_interrupt_ends_an_outstanding_poll_and_caps_every_later_call(
    server: tuple[Scripted, str],
) -> None:
    servicer, address = server
    servicer.offers = 0
    client = RaftschedClient([address], deadline=60.0)
    transport = GrpcWorkerTransport(client, poll_client=RaftschedClient([address]))
    polled: list[list[object]] = []
    poll = threading.Thread(target=lambda: polled.append(transport.lease("w1", 1, 600)))
    poll.start()
    try:
        deadline = time.monotonic() + 20
        while not servicer.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        assert servicer.requests, "the poll never reached the server"
        transport.interrupt(0.5)
        poll.join(20)  # a bound far below the poll's 600s
        assert not poll.is_alive() and polled == [[]]
        assert transport.lease("w1", 1, 600) == []  # later polls: not even sent
        assert len(servicer.requests) == 1
        transport.release("w1", [(KEY, 41)])  # other calls still go, on the main client...
        assert len(servicer.requests) == 2
        # ...but none waits for an answer past call_timeout (here, a poll the server holds
        # for 30s, sent as any other call: the client's own deadline is 60s).
        held = worker_pb2.LeaseRequest(worker_id="w1", max_tasks=1, wait_seconds=30)
        with pytest.raises(ApiError, match="DEADLINE_EXCEEDED"):
            transport._call("Lease", held)
    finally:
        client.close()


def test_the_worker_command_runs_noop_against_the_service_and_stops_on_sigterm(
    server: tuple[Scripted, str], tmp_path: Path
) -> None:
    servicer, address = server
    servicer.offers = 3
    record = tmp_path / "arrivals.jsonl"
    env = {**os.environ, "RAFTSCHED_HOME": str(tmp_path), "RAFTSCHED_TOKEN": "tok-from-env"}
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "raftsched", "worker", "--server", address, "--noop"),
            *("--concurrency", "2", "--worker-id", "bench-1", "--record", str(record)),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while (
            time.monotonic() < deadline
            and sum(r.__class__.__name__ == "CompleteRequest" for r in servicer.requests) < 3
        ):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    completes = [r for r in servicer.requests if r.__class__.__name__ == "CompleteRequest"]
    assert len(completes) == 3 and all(r.success and r.worker_id == "bench-1" for r in completes)
    leases = [r for r in servicer.requests if r.__class__.__name__ == "LeaseRequest"]
    assert all(r.max_tasks == 2 and r.worker_id == "bench-1" for r in leases)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(lines) == 3 and lines[0]["task_id"] == "load" and lines[0]["token"] == 41
    assert "noop etl/manual__1/load try 2 token 41 arrived" in stderr
    assert "tok-from-env" not in stderr
