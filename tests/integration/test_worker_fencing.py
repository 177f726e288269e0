"""Worker self-fencing (issue #10, lease safety by construction): an attempt whose worker cannot
heartbeat is killed before its lease can expire, so it never runs beside its retry, even with
``retry_delay`` 0.

- The supervisor's fence, directly: an attempt not extended dies at its deadline and says so;
  one that is extended lives on.
- A worker frozen by SIGSTOP (3 real nodes, a second worker, ``lease_ttl`` 4): its attempt's
  processes die (seen in /proc) before the lease's last known expiry, the retry runs on the
  other worker, and the two attempts' execution windows (ticks written by the task itself)
  never overlap; after SIGCONT the frozen worker reports no success and runs nothing again.
- The same with the worker cut off: it runs in a network namespace of its own and reaches the
  nodes over a veth (through a forwarder in the root namespace); the cut is an iptables DROP
  inside its namespace, so its calls hang rather than fail.

Every wait is bounded; SQLite (the database plays no part here).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from api_harness import WORKER, ApiCluster, WorkerProc
from harness import child_env, wait_for

from raftsched.api.gen import common_pb2, dag_pb2
from raftsched.core.model import TaskKey
from raftsched.worker.runner import Attempt
from raftsched.worker.transport import Assignment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

S = common_pb2
LEASE_TTL = 4.0
HEARTBEAT = 0.5

DAG = """\
    import os
    import time
    from datetime import datetime, timedelta

    from raftsched import DAG, BashTask, PythonTask

    LOG = "@LOG@"


    def tick(**_):
        try_number = int(os.environ["RAFTSCHED_TRY_NUMBER"])
        with open(LOG, "a") as f:
            f.write(f"{try_number} pid {os.getpid()}\\n")
        for _ in range(100_000 if try_number == 1 else 30):
            with open(LOG, "a") as f:
                f.write(f"{try_number} tick {time.time():.6f}\\n")
            time.sleep(0.05)


    BASH = (
        'echo "$RAFTSCHED_TRY_NUMBER pid $$" >> ' + LOG + '; '
        'n=100000; [ "$RAFTSCHED_TRY_NUMBER" -ge 2 ] && n=30; '
        'for ((i = 0; i < n; i++)); do '
        'echo "$RAFTSCHED_TRY_NUMBER tick $EPOCHREALTIME" >> ' + LOG + '; sleep 0.05; done'
    )
    START = datetime(2024, 1, 1)

    with DAG("fence_py", schedule=None, start_date=START) as py_dag:
        PythonTask("long", fn=tick, retries=1, retry_delay=timedelta(0))

    with DAG("fence_sh", schedule=None, start_date=START) as sh_dag:
        BashTask("long", command=BASH, retries=1, retry_delay=timedelta(0))
    """


# -- the supervisor's fence, directly -----------------------------------------------------------


def _assignment(command: str) -> Assignment:
    return Assignment(
        key=TaskKey("d", "r", "t"), token=1, try_number=1, kind="bash", command=command
    )


def test_the_supervisor_kills_an_attempt_whose_deadline_passes() -> None:
    attempt = Attempt(_assignment("sleep 60"), lambda *_: None, deadline=time.monotonic() + 0.5)
    started = time.monotonic()
    outcome = attempt.run()
    took = time.monotonic() - started
    assert attempt.fenced and not outcome.success
    assert 0.4 < took < 5, took


def test_an_extended_attempt_lives_past_its_first_deadline() -> None:
    attempt = Attempt(_assignment("sleep 1.5"), lambda *_: None, deadline=time.monotonic() + 0.5)
    stop = threading.Event()

    def extend() -> None:
        while not stop.wait(0.1):
            attempt.extend(time.monotonic() + 0.5)

    pusher = threading.Thread(target=extend, daemon=True)
    pusher.start()
    try:
        outcome = attempt.run()
    finally:
        stop.set()
        pusher.join(5)
    assert outcome.success and not attempt.fenced


# -- helpers for the cluster tests --------------------------------------------------------------


@dataclass
class Ticks:
    pids: dict[int, int]  # try -> pid of the task process
    first: dict[int, float]  # try -> its first tick (wall clock)
    last: dict[int, float]  # try -> its last tick


def read_ticks(path: Path) -> Ticks:
    ticks = Ticks({}, {}, {})
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue  # a line being written
        try_number, what = int(parts[0]), parts[1]
        if what == "pid":
            ticks.pids[try_number] = int(parts[2])
            continue
        at = float(parts[2])
        ticks.first[try_number] = min(ticks.first.get(try_number, at), at)
        ticks.last[try_number] = max(ticks.last.get(try_number, at), at)
    return ticks


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _wait_death(pid: int, started: str, timeout: float) -> float:
    """Poll /proc every 10 ms; the wall-clock time at which the process was seen gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _start_time(pid) != started:
            return time.time()
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still alive {timeout}s after the cut")


class ExpiryWatch:
    """Follows the cluster's ``lease_expires_at`` of the first attempt (its token) while it
    runs: ``expiry`` is the latest seen (wall clock; the nodes share this machine's clock)."""

    def __init__(self, cluster: ApiCluster, client: Any, dag_id: str, run_id: str) -> None:
        self.cluster, self.client, self.dag_id, self.run_id = cluster, client, dag_id, run_id
        self.token = 0
        self.expiry = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            with contextlib.suppress(Exception):
                ti = self.cluster.current(self.client, self.dag_id, self.run_id).get("long")
                if ti is None or ti.try_number != 1 or ti.state != S.TASK_STATE_RUNNING:
                    continue
                self.token = self.token or ti.lease_token
                if ti.lease_token == self.token and ti.HasField("lease_expires_at"):
                    at = ti.lease_expires_at.seconds + ti.lease_expires_at.nanos / 1e9
                    self.expiry = max(self.expiry, at)

    def __enter__(self) -> ExpiryWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


def run_scenario(
    tmp_path: Path,
    url: str,
    dag_id: str,
    start_victim: Callable[[ApiCluster], WorkerProc],
    cut: Callable[[WorkerProc], None],
    heal: Callable[[WorkerProc], None],
) -> None:
    """Shared by both cluster tests: ``cut`` takes the victim worker off the cluster while it
    runs the first attempt, ``heal`` gives it back once the retry has succeeded elsewhere."""
    record = tmp_path / "ticks.log"
    record.touch()
    dags = {"fence.py": textwrap.dedent(DAG).replace("@LOG@", str(record))}
    with ApiCluster(
        tmp_path, url, dags=dags, lease_ttl=LEASE_TTL, heartbeat_interval=HEARTBEAT
    ) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {dag_id})
        victim = start_victim(cluster)
        run_id = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id=dag_id)).run.run_id

        def running_on_victim(ti: Any) -> bool:
            return ti.state == S.TASK_STATE_RUNNING and ti.worker_id == "victim"

        first = cluster.wait_task(client, dag_id, run_id, "long", running_on_victim)
        assert first.try_number == 1
        ticks = wait_for(
            lambda: (t := read_ticks(record)).pids.get(1) and t.first.get(1) and t,
            timeout=30,
            what="the first attempt's ticks",
        )
        pid = ticks.pids[1]
        started = _start_time(pid)
        assert started is not None
        cluster.start_worker("rescuer", concurrency=1)  # polling, ready for the retry
        with ExpiryWatch(cluster, client, dag_id, run_id) as watch:
            time.sleep(3 * HEARTBEAT)  # the watch sees the lease extended
            cut_at = time.time()
            cut(victim)
            try:
                died_at = _wait_death(pid, started, timeout=LEASE_TTL + 5)
                done = cluster.wait_task(
                    client,
                    dag_id,
                    run_id,
                    "long",
                    lambda ti: ti.state == S.TASK_STATE_SUCCESS,
                    timeout=60,
                )
            finally:
                heal(victim)
        assert (done.worker_id, done.try_number) == ("rescuer", 2), done
        assert done.lease_token > first.lease_token
        # Dead before the lease could expire: before the last expiry the cluster was seen to
        # hold (a heartbeat the watch missed could only have moved it later).
        assert watch.token == first.lease_token and watch.expiry > cut_at
        assert died_at < watch.expiry, (died_at - cut_at, watch.expiry - cut_at)
        ticks = read_ticks(record)
        assert ticks.last[1] < died_at
        assert ticks.last[1] < ticks.first[2], "the two attempts overlapped"
        # Back in contact: the victim runs nothing again and reports no success for try 1.
        time.sleep(3)
        again = read_ticks(record)
        assert sorted(again.pids) == [1, 2] and again.last[1] == ticks.last[1]
        ti = cluster.current(client, dag_id, run_id)["long"]
        assert (ti.state, ti.try_number, ti.worker_id) == (S.TASK_STATE_SUCCESS, 2, "rescuer")
        log = victim.log_path.read_text()
        assert "lost contact with the cluster" in log, log[-3000:]
        assert f"{dag_id}/{run_id}/long succeeded" not in log
        assert "reported " not in log  # no failure accepted for it either: the lease was gone
        print(
            f"cut at 0; attempt 1 dead at {died_at - cut_at:.2f}s, its lease's last known expiry"
            f" {watch.expiry - cut_at:.2f}s, attempt 2's first tick {ticks.first[2] - cut_at:.2f}s"
        )


# -- a worker frozen by SIGSTOP ---------------------------------------------------------------


def test_a_frozen_workers_attempt_dies_before_its_lease_expires(
    tmp_path: Path, db_url: str
) -> None:
    """A PythonTask (forked by its DAG file's fork server, which holds the fence)."""

    def start(cluster: ApiCluster) -> WorkerProc:
        return cluster.start_worker("victim", concurrency=1)

    run_scenario(
        tmp_path,
        db_url,
        "fence_py",
        start,
        cut=lambda w: w.signal(signal.SIGSTOP),
        heal=lambda w: w.signal(signal.SIGCONT),
    )


# -- a worker cut off by its network namespace ---------------------------------------------


class Forwarder:
    """TCP forwarders in the root namespace: ``host:port`` -> ``127.0.0.1:target`` for each
    target, so a worker in a namespace reaches nodes that listen on loopback."""

    def __init__(self, host: str, targets: list[str]) -> None:
        self.listeners: list[socket.socket] = []
        self.conns: list[socket.socket] = []
        self.addresses: list[str] = []
        for target in targets:
            listener = socket.create_server((host, 0))
            self.listeners.append(listener)
            self.addresses.append(f"{host}:{listener.getsockname()[1]}")
            t_host, t_port = target.rsplit(":", 1)
            threading.Thread(
                target=self._accept, args=(listener, (t_host, int(t_port))), daemon=True
            ).start()

    def _accept(self, listener: socket.socket, target: tuple[str, int]) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(target, timeout=5)
            except OSError:
                conn.close()
                continue
            upstream.settimeout(None)
            self.conns += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for s in self.listeners + self.conns:
            with contextlib.suppress(OSError):
                s.close()


@dataclass
class NetnsWorker(WorkerProc):
    namespace: str = ""

    def argv(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *super().argv()]


@pytest.fixture
def hosts() -> Iterator[Any]:
    from scripts.partition import netns

    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(f"netns unavailable: {reason}")
    with netns.Hosts(1) as made:
        yield made
    assert made.leftovers() == []


def test_a_cut_off_workers_attempt_dies_before_its_lease_expires(
    tmp_path: Path, db_url: str, hosts: Any
) -> None:
    """A BashTask (forked by the worker's supervisor) on a worker in its own namespace, cut
    off by DROP rules there: its calls hang; its own watchdog kills the attempt."""
    forwarders: list[Forwarder] = []

    def start(cluster: ApiCluster) -> WorkerProc:
        forwarder = Forwarder(hosts.gateway, cluster.api_addresses)
        forwarders.append(forwarder)
        args = ["worker", "--server", ",".join(forwarder.addresses), "--token", WORKER]
        args += ["--worker-id", "victim", "--concurrency", "1"]
        proc = NetnsWorker(
            index=100 + len(cluster.workers),
            address="worker victim",
            config_path=cluster.config_path,
            log_path=cluster.log_dir / "worker-victim.log",
            env=child_env(),
            args=args,
            namespace=hosts.hosts[0].namespace,
        )
        proc.start()
        cluster.workers["victim"] = proc
        cluster.extra.append(proc)
        return proc

    try:
        run_scenario(
            tmp_path,
            db_url,
            "fence_sh",
            start,
            cut=lambda w: hosts.block(0, [hosts.gateway]),
            heal=lambda w: hosts.heal(0),
        )
    finally:
        for forwarder in forwarders:
            forwarder.close()
