"""The task supervisor's death report (docs/architecture.md §11), against a recording
WorkerService on loopback: a real worker-side executor in a child process, a real supervisor,
a real attempt (with a daemon it forked), kill -9 of the "worker".

- The held lease is reported as a failed attempt, fenced by its token and the worker's id,
  and only once every process of the attempt is gone (checked when the report arrives).
- The worker's calls in flight that lease (its last poll, its last CompleteBatch asking for
  more) are replayed with their request ids and wait 0; what they grant that was not held is
  handed back with Release; a held lease is not.
- The transport names each poll's request id before sending it; a node's long poll whose
  caller has gone proposes no further LeaseTasks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftsched.api.gen import common_pb2, worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guard is Linux")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class Recording(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self, pidfile: Path) -> None:
        self.pidfile = pidfile
        self.completes: list[tuple[Any, list[bool]]] = []  # (request, pids alive then)
        self.leases: list[Any] = []
        self.releases: list[Any] = []
        self.done = threading.Event()

    def Complete(self, request: Any, context: grpc.ServicerContext) -> Any:
        pids = [int(p) for p in self.pidfile.read_text().split()]
        self.completes.append((request, [_alive(p) for p in pids]))
        return worker_pb2.CompleteResponse()

    def Lease(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.leases.append(request)
        grants = [
            worker_pb2.TaskLease(
                key=common_pb2.TaskKey(dag_id="d", run_id="r", task_id=task),
                token=token,
                kind="bash",
            )
            for task, token in (("t", 5), ("never", 7))  # a replay may return a held one too
        ]
        return worker_pb2.LeaseResponse(leases=grants)

    def Release(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.releases.append(request)
        if len(self.releases) == 2:  # one per call in flight: the poll, the outcomes' call
            self.done.set()
        return worker_pb2.ReleaseResponse(released=list(request.leases))


WORKER = """\
    import os, sys, time
    from raftsched.worker.executor import executor

    address, pidfile, workdir = sys.argv[1:4]
    ex = executor()
    ex.arm({"servers": [address], "token": None, "tls_ca": None, "worker_id": "w",
            "lease_ttl": 10})
    ex.hold("d/r/t#5", {"dag_id": "d", "run_id": "r", "task_id": "t", "token": 5})
    null = os.open(os.devnull, os.O_WRONLY)
    command = (f"sleep 1000 & echo $! > {pidfile}.tmp; echo $$ >> {pidfile}.tmp;"
               f" mv {pidfile}.tmp {pidfile}; sleep 1000")
    ex.spawn(kind="bash", env={"PATH": os.environ["PATH"]}, cwd=workdir, stdout=null,
             stderr=null, command=command)
    ex.polling("rid-1", 2)
    ex.polling("rid-2", 1, slot="outcomes")  # a CompleteBatch asking for one more task
    ex.polling("rid-0", 3, slot="gone")
    ex.polling("", 0, slot="gone")  # answered: nothing of it to replay
    print("ready", flush=True)
    time.sleep(1000)
    """


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Recording, str]]:
    servicer = Recording(tmp_path / "pids")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def test_a_dead_workers_attempt_is_reported_once_it_is_dead(
    tmp_path: Path, service: tuple[Recording, str]
) -> None:
    servicer, address = service
    pidfile = tmp_path / "pids"
    worker = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WORKER), address, str(pidfile), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        pids = [int(p) for p in pidfile.read_text().split()]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        assert servicer.done.wait(30), "no death report"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)

    ((complete, alive_then),) = servicer.completes
    assert (complete.worker_id, complete.key.task_id, complete.token) == ("w", "t", 5)
    assert not complete.success and "died while the attempt ran" in complete.message
    assert alive_then == [False, False], "reported before every process of the attempt died"
    replayed = sorted((x.request_id, x.worker_id, x.max_tasks) for x in servicer.leases)
    assert replayed == [("rid-1", "w", 2), ("rid-2", "w", 1)]
    assert all(x.wait_seconds == 0 and x.lease_ttl_seconds == 10 for x in servicer.leases)
    assert len(servicer.releases) == 2
    release = servicer.releases[0]
    assert release.worker_id == "w"
    assert [(r.key.task_id, r.token) for r in release.leases] == [("never", 7)]


def test_the_transport_names_each_poll_before_sending_it(
    service: tuple[Recording, str],
) -> None:
    """What the death report replays: the request id the Lease really carried."""
    from raftsched.api.client import RaftschedClient
    from raftsched.worker.grpc_transport import GrpcWorkerTransport

    servicer, address = service
    client = RaftschedClient([address], deadline=5.0)
    try:
        transport = GrpcWorkerTransport(client, lease_ttl=10.0, access={"servers": [address]})
        named: list[tuple[str, int]] = []
        transport.on_poll = lambda rid, n: named.append((rid, n))
        transport.lease("w", 3, 0.0)
        assert transport.last_words() == {"servers": [address]}
    finally:
        client.close()
    ((rid, n),) = named
    assert rid and n == 3 and servicer.leases[-1].request_id == rid


@pytest.fixture
def sqlite_engine(sqlite_url: str) -> Iterator[Any]:
    from raftsched.store.engine import create_engine_for
    from raftsched.store.migrate import init_db

    engine = create_engine_for(sqlite_url)
    init_db(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def test_a_poll_whose_caller_left_is_granted_nothing_more(sqlite_engine: Any) -> None:
    """A long poll woken after its caller went away (a dead worker) proposes no further
    LeaseTasks: what it would grant would only wait for its TTL (or the death report)."""
    from test_api_bounds import Api, Context

    from raftsched.api.gen import dag_pb2
    from raftsched.core import commands as c

    class Leaving(Context):
        active = True

        def is_active(self) -> bool:
            return self.active

        def time_remaining(self) -> float | None:
            return 10.0

    api = Api(sqlite_engine)
    try:
        context = Leaving()
        answers: list[Any] = []
        poll = threading.Thread(
            target=lambda: answers.append(
                api.workers.Lease(
                    worker_pb2.LeaseRequest(worker_id="w", max_tasks=1, wait_seconds=5), context
                )
            )
        )
        poll.start()
        deadline = time.monotonic() + 5
        while not api.proposer.proposed and time.monotonic() < deadline:
            time.sleep(0.01)  # its first LeaseTasks found nothing: it waits now
        time.sleep(0.2)  # into its wait for work (not a timing assertion: a head start)
        context.active = False  # the worker died
        _, err = api.call(api.dags.TriggerDag, dag_pb2.TriggerDagRequest(dag_id="d"))
        assert err is None
        api.workers.signal.notify()  # a task is queued: the waiting poll wakes
        poll.join(10)
        assert not poll.is_alive() and len(answers) == 1 and not answers[0].leases
        leases = [x for x in api.proposer.proposed if isinstance(x, c.LeaseTasks)]
        assert len(leases) == 1, leases
    finally:
        api.close()
