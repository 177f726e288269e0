"""The worker loop against an in-memory FakeTransport (the real gRPC one is exercised end to end
by the cluster integration tests). Tasks are real bash processes; every wait is bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from raftsched.core.model import TaskKey
from raftsched.errors import NoQuorumError
from raftsched.worker.loop import Worker, WorkerSettings
from raftsched.worker.transport import Assignment

pytestmark = pytest.mark.timeout(60)


class FakeTransport:
    """WorkerTransport in memory: a queue of offered leases, and a record of every call."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queue: list[Assignment] = []
        self.outstanding: set[TaskKey] = set()  # leased, not yet completed or released
        self.max_outstanding = 0
        self.lease_requests: list[int] = []
        self.heartbeats: list[list[tuple[TaskKey, int]]] = []
        self.refused: set[TaskKey] = set()
        self.complete_calls: list[TaskKey] = []
        self.completed_tokens: dict[TaskKey, int] = {}
        self.completed: dict[TaskKey, tuple[bool, int | None, str]] = {}
        self.refuse_complete = False
        self.logs: dict[TaskKey, list[tuple[str, str]]] = {}
        self.released: list[tuple[TaskKey, int]] = []
        self.unavailable = 0  # the next N calls of lease/complete raise NoQuorumError

    def offer(self, *assignments: Assignment) -> None:
        with self.cond:
            self.queue.extend(assignments)
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def _maybe_fail(self) -> None:
        if self.unavailable:
            self.unavailable -= 1
            raise NoQuorumError("no quorum (fake)")

    def lease(self, worker_id: str, max_tasks: int, wait_seconds: float) -> list[Assignment]:
        with self.cond:
            self._maybe_fail()
            self.lease_requests.append(max_tasks)
            self.cond.wait_for(lambda: self.queue, wait_seconds)
            taken, self.queue = self.queue[:max_tasks], self.queue[max_tasks:]
            self.outstanding.update(a.key for a in taken)
            self.max_outstanding = max(self.max_outstanding, len(self.outstanding))
            self.cond.notify_all()
            return taken

    def heartbeat(
        self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]
    ) -> dict[TaskKey, bool]:
        with self.cond:
            self.heartbeats.append(list(leases))
            self.cond.notify_all()
            return {key: key not in self.refused for key, _ in leases}

    def complete(
        self, key: TaskKey, token: int, *, success: bool, exit_code: int | None, message: str
    ) -> bool:
        with self.cond:
            self._maybe_fail()
            self.complete_calls.append(key)
            self.cond.notify_all()
            if self.refuse_complete or key in self.refused:
                return False
            self.completed[key] = (success, exit_code, message)
            self.completed_tokens[key] = token
            self.outstanding.discard(key)
            self.cond.notify_all()
            return True

    def append_logs(self, key: TaskKey, token: int, chunks: Sequence[tuple[str, str]]) -> bool:
        with self.cond:
            if key in self.refused:
                return False
            self.logs.setdefault(key, []).extend(chunks)
            self.cond.notify_all()
            return True

    def release(self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]) -> None:
        with self.cond:
            self.released.extend(leases)
            self.outstanding.difference_update(key for key, _ in leases)
            self.cond.notify_all()


def task(task_id: str, command: str, token: int = 1) -> Assignment:
    return Assignment(
        key=TaskKey("dag", "run1", task_id), token=token, try_number=1, kind="bash", command=command
    )


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


FAST = WorkerSettings(
    concurrency=2, lease_ttl=30, heartbeat_interval=0.1, grace_period=2, lease_wait=0.1
)


@pytest.fixture
def transport() -> FakeTransport:
    return FakeTransport()


@pytest.fixture
def start_worker(transport: FakeTransport) -> Iterator[Callable[..., Worker]]:
    started: list[tuple[Worker, threading.Thread]] = []

    def start(settings: WorkerSettings = FAST, **kw: object) -> Worker:
        worker = Worker(transport, settings, worker_id="w1", **kw)  # type: ignore[arg-type]
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "the worker did not stop"


def wait_idle(worker: Worker, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while worker.running and time.monotonic() < deadline:
        time.sleep(0.02)
    return not worker.running


def test_runs_a_task_ships_its_logs_then_completes_it(
    transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    start_worker()
    a = task("hello", "echo hello; echo problem >&2")
    transport.offer(a)
    assert transport.wait_for(lambda: a.key in transport.completed)
    assert transport.completed[a.key] == (True, 0, "")
    shipped = transport.logs[a.key]
    assert "".join(t for s, t in shipped if s == "stdout") == "hello\n"
    assert "".join(t for s, t in shipped if s == "stderr") == "problem\n"


def test_a_failing_task_is_completed_as_a_failure(
    transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    start_worker()
    a = task("bad", "echo 'cannot connect to db' >&2; exit 2")
    transport.offer(a)
    assert transport.wait_for(lambda: a.key in transport.completed)
    assert transport.completed[a.key] == (False, 2, "cannot connect to db")


def test_heartbeats_carry_every_lease_with_its_token(
    tmp_path: Path, transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    start_worker()
    gate = tmp_path / "gate"
    a, b = (
        task("a", f"until [ -e {gate} ]; do sleep 0.05; done", token=11),
        task("b", f"until [ -e {gate} ]; do sleep 0.05; done", token=12),
    )
    transport.offer(a, b)
    assert transport.wait_for(lambda: any(len(h) == 2 for h in transport.heartbeats))
    beat = next(h for h in transport.heartbeats if len(h) == 2)
    assert sorted(beat) == [(a.key, 11), (b.key, 12)]
    gate.touch()
    assert transport.wait_for(lambda: len(transport.completed) == 2)


def test_a_refused_heartbeat_kills_the_attempt_at_once_and_it_is_not_completed(
    tmp_path: Path, transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker()
    pid_file = tmp_path / "pid"
    a = task("long", f"sleep 1000 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait")
    transport.offer(a)
    assert transport.wait_for(pid_file.exists)
    child = int(pid_file.read_text())
    with transport.cond:
        transport.refused.add(a.key)
    assert transport.wait_for(lambda: not alive(child))
    assert wait_idle(worker)
    assert a.key not in transport.completed
    assert transport.released == []


def test_a_newer_lease_of_the_same_task_fences_the_older_attempt(
    tmp_path: Path, transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    start_worker()
    pid_file = tmp_path / "pid"
    old = task("same", f"sleep 1000 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait")
    transport.offer(old)
    assert transport.wait_for(pid_file.exists)
    child = int(pid_file.read_text())
    new = task("same", "echo second try", token=2)
    transport.offer(new)
    assert transport.wait_for(lambda: new.key in transport.completed)
    assert transport.completed_tokens[new.key] == 2
    assert transport.wait_for(lambda: not alive(child))


def test_capacity_is_respected(
    tmp_path: Path, transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker()  # concurrency 2
    gate = tmp_path / "gate"
    tasks = [task(f"t{i}", f"until [ -e {gate} ]; do sleep 0.05; done") for i in range(5)]
    transport.offer(*tasks)
    assert transport.wait_for(lambda: len(transport.outstanding) == 2)
    deadline = time.monotonic() + 20
    while len(worker.running) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(worker.running) == 2
    assert len(transport.queue) == 3
    gate.touch()
    assert transport.wait_for(lambda: len(transport.completed) == 5)
    assert transport.max_outstanding <= 2
    assert all(1 <= n <= 2 for n in transport.lease_requests)
    assert all(transport.completed[t.key][0] for t in tasks)


def test_stop_waits_for_running_attempts_within_the_grace_period(
    tmp_path: Path, transport: FakeTransport
) -> None:
    worker = Worker(transport, replace(FAST, grace_period=30), worker_id="w1")  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    gate = tmp_path / "gate"
    a = task("finishing", f"until [ -e {gate} ]; do sleep 0.05; done; echo done")
    transport.offer(a)
    assert transport.wait_for(lambda: a.key in transport.outstanding)
    worker.stop()
    later = task("later", "echo never")
    transport.offer(later)
    # Still waiting for the attempt (grace is 30s), still heartbeating it, leasing nothing.
    beats = len(transport.heartbeats)
    assert transport.wait_for(lambda: len(transport.heartbeats) > beats + 2)
    assert runner.is_alive() and a.key not in transport.completed
    gate.touch()
    runner.join(30)
    assert not runner.is_alive()
    assert transport.completed[a.key] == (True, 0, "")
    assert later.key not in transport.completed and later in transport.queue
    assert transport.released == []


def test_stop_kills_and_releases_attempts_still_running_after_the_grace_period(
    tmp_path: Path, transport: FakeTransport
) -> None:
    settings = WorkerSettings(
        concurrency=2, heartbeat_interval=0.1, grace_period=0.3, lease_wait=0.1
    )
    worker = Worker(transport, settings, worker_id="w1")  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run)
    runner.start()
    pid_file = tmp_path / "pid"
    a = task("stuck", f"sleep 1000 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait")
    transport.offer(a)
    assert transport.wait_for(pid_file.exists)
    child = int(pid_file.read_text())
    worker.stop()
    runner.join(30)
    assert not runner.is_alive()
    assert not alive(child)
    assert transport.released == [(a.key, a.token)]
    assert a.key not in transport.completed


def test_no_accepted_heartbeat_for_lease_ttl_kills_the_attempt(
    tmp_path: Path, transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    class Silent(FakeTransport):
        def heartbeat(self, worker_id: str, leases: object) -> dict[TaskKey, bool]:
            with self.cond:
                self.heartbeats.append([])
                self.cond.notify_all()
            raise NoQuorumError("no quorum (fake)")

    silent = Silent()
    settings = WorkerSettings(concurrency=1, lease_ttl=0.5, heartbeat_interval=0.1, lease_wait=0.1)
    worker = Worker(silent, settings, worker_id="w1")  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        a = task("orphan", "sleep 1000")
        silent.offer(a)
        assert silent.wait_for(lambda: a.key in silent.outstanding)
        assert silent.wait_for(lambda: len(silent.heartbeats) >= 1)  # the attempt is running
        assert wait_idle(worker)
        assert a.key not in silent.completed
    finally:
        worker.stop()
        runner.join(30)


def test_a_refused_complete_is_dropped_and_the_worker_goes_on(
    transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker()
    transport.refuse_complete = True
    first = task("first", "true")
    transport.offer(first)
    assert transport.wait_for(lambda: first.key in transport.complete_calls)
    assert wait_idle(worker)
    transport.refuse_complete = False
    second = task("second", "true")
    transport.offer(second)
    assert transport.wait_for(lambda: second.key in transport.completed)
    assert first.key not in transport.completed


def test_an_unavailable_cluster_is_retried(
    transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    transport.unavailable = 2  # the first two leases fail
    start_worker()
    a = task("retry", "true")
    transport.offer(a)
    assert transport.wait_for(lambda: a.key in transport.completed)


def test_noop_completes_at_once_and_records_arrivals(
    transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    recorded: list[tuple[TaskKey, float]] = []
    settings = WorkerSettings(concurrency=4, heartbeat_interval=0.1, lease_wait=0.1, noop=True)
    worker = start_worker(settings, record=lambda a, t: recorded.append((a.key, t)))
    tasks = [task(f"n{i}", "exit 1") for i in range(6)]
    before = time.time()
    transport.offer(*tasks)
    assert transport.wait_for(lambda: len(transport.completed) == 6)
    assert all(transport.completed[t.key] == (True, 0, "noop") for t in tasks)
    assert [key for key, _ in recorded] == [t.key for t in tasks]
    assert all(t >= before for _, t in recorded)
    assert len(worker.arrivals) == 6
    assert transport.logs == {}
