"""`raftsched worker` stops promptly on SIGTERM: a real worker process against a real gRPC server
(``build_server``) whose WorkerService grants one long task and then holds every Lease poll
open. The worker must cut its poll short, give the attempt ``grace_period``, kill it, hand the
lease back and exit 0; and exit as promptly when the cluster is gone by then. Every wait is a
bound, not a timing assertion."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftsched.api.gen import common_pb2, worker_pb2, worker_pb2_grpc
from raftsched.api.server import ApiServer, build_server
from raftsched.config import default_config

pytestmark = pytest.mark.timeout(120)

EXIT_BOUND = 15.0  # grace_period 1s + a few seconds, with room for a loaded machine
TOKEN = 7


class OneLongTask(worker_pb2_grpc.WorkerServiceServicer):
    """Grants one `sleep 60` bash task, then holds Lease polls open until their wait ends or
    the caller goes. Records every call by name."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.calls: list[tuple[str, Any]] = []
        self.granted = False

    def _seen(self, name: str, request: Any) -> None:
        with self.cond:
            self.calls.append((name, request))
            self.cond.notify_all()

    def names(self) -> list[str]:
        with self.cond:
            return [name for name, _ in self.calls]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.05))
            return True

    def Lease(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen("Lease", request)
        with self.cond:
            first, self.granted = not self.granted, True
        if first:
            lease = worker_pb2.TaskLease(
                key=common_pb2.TaskKey(dag_id="dag", run_id="run1", task_id="long"),
                token=TOKEN,
                try_number=1,
                kind="bash",
                command="sleep 60",
            )
            return worker_pb2.LeaseResponse(leases=[lease])
        end = time.monotonic() + request.wait_seconds
        while time.monotonic() < end and context.is_active():
            time.sleep(0.05)
        return worker_pb2.LeaseResponse()

    def Heartbeat(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen("Heartbeat", request)
        return worker_pb2.HeartbeatResponse(
            leases=[worker_pb2.LeaseStatus(lease=ref, ok=True) for ref in request.leases]
        )

    def Complete(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen("Complete", request)
        return worker_pb2.CompleteResponse()

    def AppendLogs(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen("AppendLogs", request)
        return worker_pb2.AppendLogsResponse(last_seq=len(request.chunks))

    def Release(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._seen("Release", request)
        return worker_pb2.ReleaseResponse(released=list(request.leases))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[OneLongTask, ApiServer]]:
    servicer = OneLongTask()
    api = dataclasses.replace(default_config(tmp_path).api, grpc_bind="127.0.0.1:0")
    server = build_server(api, [servicer], max_workers=8)
    server.start()
    try:
        yield servicer, server
    finally:
        server.stop(grace=None)


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    config = tmp_path / "raftsched.cfg"
    config.write_text("[worker]\ngrace_period = 1\nheartbeat_interval = 0.5\n")

    def start(address: str) -> subprocess.Popen[str]:
        env = {**os.environ, "RAFTSCHED_HOME": str(tmp_path)}
        for var in ("RAFTSCHED_SERVER", "RAFTSCHED_TOKEN", "RAFTSCHED_CONFIG"):
            env.pop(var, None)
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "raftsched", "--config", str(config), "worker"),
                *("--server", address, "--worker-id", "w-shutdown"),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def running_and_polling(servicer: OneLongTask) -> Callable[[], bool]:
    """The attempt runs (its lease was heartbeated) and a second Lease poll is open."""
    return lambda: servicer.names().count("Lease") >= 2 and "Heartbeat" in servicer.names()


def exit_within(proc: subprocess.Popen[str], bound: float) -> tuple[int | None, str]:
    try:
        _, stderr = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate(timeout=30)
        return None, stderr
    return proc.returncode, stderr


def test_sigterm_cuts_the_poll_kills_after_the_grace_period_and_releases_the_lease(
    served: tuple[OneLongTask, ApiServer], start_worker: Callable[[str], subprocess.Popen[str]]
) -> None:
    servicer, server = served
    proc = start_worker(server.address)
    assert servicer.wait_for(running_and_polling(servicer)), proc.stderr
    proc.send_signal(signal.SIGTERM)
    code, stderr = exit_within(proc, EXIT_BOUND)
    assert code == 0, f"exit {code} (None: still running after {EXIT_BOUND}s)\n{stderr}"
    released = [r for name, r in servicer.calls if name == "Release"]
    assert [(ref.key.task_id, ref.token) for r in released for ref in r.leases] == [("long", TOKEN)]
    assert "Complete" not in servicer.names()


def test_sigterm_with_the_cluster_gone_still_exits_promptly(
    served: tuple[OneLongTask, ApiServer], start_worker: Callable[[str], subprocess.Popen[str]]
) -> None:
    servicer, server = served
    proc = start_worker(server.address)
    assert servicer.wait_for(running_and_polling(servicer)), proc.stderr
    server.stop(grace=None)
    proc.send_signal(signal.SIGTERM)
    code, stderr = exit_within(proc, EXIT_BOUND)
    assert code == 0, f"exit {code} (None: still running after {EXIT_BOUND}s)\n{stderr}"
