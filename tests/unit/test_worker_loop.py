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
from raftsched.worker.loop import SHUTDOWN_CALL_TIMEOUT, Worker, WorkerSettings
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
        self.polling = 0  # lease() calls under way
        self.interrupted: list[float] = []  # call_timeout of each interrupt()

    def offer(self, *assignments: Assignment) -> None:
        with self.cond:
            self.queue.extend(assignments)
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
        """Wait (bounded) for ``predicate``, re-checked on every call and every 20 ms: it may
        read what no call of the transport changes (a file, /proc)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.02))
            return True

    def _maybe_fail(self) -> None:
        if self.unavailable:
            self.unavailable -= 1
            raise NoQuorumError("no quorum (fake)")

    def lease(self, worker_id: str, max_tasks: int, wait_seconds: float) -> list[Assignment]:
        with self.cond:
            self._maybe_fail()
            if self.interrupted:
                return []
            self.lease_requests.append(max_tasks)
            self.polling += 1
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.queue or self.interrupted, wait_seconds)
            self.polling -= 1
            if self.interrupted:  # cut short (a real poll's grants would be lost, not kept)
                self.cond.notify_all()
                return []
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

    def interrupt(self, call_timeout: float) -> None:
        with self.cond:
            self.interrupted.append(call_timeout)
            self.cond.notify_all()


def task(task_id: str, command: str, token: int = 1) -> Assignment:
    return Assignment(
        key=TaskKey("dag", "run1", task_id), token=token, try_number=1, kind="bash", command=command
    )


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


class Process:
    """A process seen by pid and start time: a reused pid is not it."""

    def __init__(self, pid: int) -> None:
        stat = _stat(pid)
        assert stat is not None, f"process {pid} is already gone"
        self.pid, self.started = pid, stat[19]

    def alive(self) -> bool:
        stat = _stat(self.pid)
        return stat is not None and stat[19] == self.started and stat[0] not in ("Z", "X")


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


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
    child = Process(int(pid_file.read_text()))
    with transport.cond:
        transport.refused.add(a.key)
    assert transport.wait_for(lambda: not child.alive())
    assert wait_idle(worker)
    assert a.key not in transport.completed and a.key not in transport.complete_calls
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


def test_stop_ends_an_outstanding_long_poll_at_once(transport: FakeTransport) -> None:
    worker = Worker(transport, replace(FAST, lease_wait=600), worker_id="w1")  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    assert transport.wait_for(lambda: transport.polling == 1)
    worker.stop()
    runner.join(30)  # a bound far below the poll's 600s, not a timing assertion
    assert not runner.is_alive()
    assert transport.interrupted and transport.polling == 0


def test_a_lease_that_arrives_after_stop_is_handed_back() -> None:
    class SigtermMeanwhile(FakeTransport):  # stop() lands while the grants are on their way
        worker: Worker

        def lease(self, worker_id: str, max_tasks: int, wait_seconds: float) -> list[Assignment]:
            taken = super().lease(worker_id, max_tasks, wait_seconds)
            if taken:
                self.worker.stop()
            return taken

    transport = SigtermMeanwhile()
    worker = transport.worker = Worker(transport, FAST, worker_id="w1")  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    a = task("late", "echo never")
    transport.offer(a)
    runner.join(30)
    assert not runner.is_alive()
    assert transport.released == [(a.key, a.token)]
    assert a.key not in transport.complete_calls


class Gone(FakeTransport):
    """Once ``gone``, no node answers: a call hangs for its deadline, then raises NoQuorumError,
    as the real client does: ``DEADLINE`` before interrupt(), its call_timeout after. A lease
    poll ends at interrupt()."""

    DEADLINE = 10.0

    def __init__(self) -> None:
        super().__init__()
        self.gone = False
        self.calls_while_gone: list[str] = []

    def _unanswered(self, name: str) -> None:
        with self.cond:
            if not self.gone:
                return
            self.calls_while_gone.append(name)
            self.cond.notify_all()
            timeout = self.interrupted[0] if self.interrupted else self.DEADLINE
            self.cond.wait(timeout)
        raise NoQuorumError(f"no node answers {name} (fake)")

    def lease(self, worker_id: str, max_tasks: int, wait_seconds: float) -> list[Assignment]:
        with self.cond:
            if self.gone and not self.cond.wait_for(lambda: self.interrupted, self.DEADLINE):
                raise NoQuorumError("no node answers lease (fake)")
        return super().lease(worker_id, max_tasks, wait_seconds)

    def heartbeat(
        self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]
    ) -> dict[TaskKey, bool]:
        self._unanswered("heartbeat")
        return super().heartbeat(worker_id, leases)

    def complete(
        self, key: TaskKey, token: int, *, success: bool, exit_code: int | None, message: str
    ) -> bool:
        self._unanswered("complete")
        return super().complete(key, token, success=success, exit_code=exit_code, message=message)

    def append_logs(self, key: TaskKey, token: int, chunks: Sequence[tuple[str, str]]) -> bool:
        self._unanswered("append_logs")
        return super().append_logs(key, token, chunks)

    def release(self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]) -> None:
        self._unanswered("release")
        super().release(worker_id, leases)


def test_shutdown_is_bounded_when_the_cluster_is_gone(tmp_path: Path) -> None:
    gone = Gone()
    # A lease_ttl of 600s: an outcome retried "while the lease may be ours" would outlast the
    # test's bound; so would a release or a last append_logs on the client's full deadline.
    settings = WorkerSettings(
        concurrency=2, lease_ttl=600, heartbeat_interval=0.1, grace_period=3, lease_wait=0.1
    )
    worker = Worker(gone, settings, worker_id="w1")  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    gate, pid_file = tmp_path / "gate", tmp_path / "pid"
    ending = task("ending", f"until [ -e {gate} ]; do sleep 0.05; done; echo bye")
    stuck = task(
        "stuck", f"sleep 1000 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait"
    )
    gone.offer(ending, stuck)
    assert gone.wait_for(lambda: pid_file.exists() and len(worker.running) == 2)
    child = Process(int(pid_file.read_text()))
    with gone.cond:
        gone.gone = True
    worker.stop()
    gate.touch()  # "ending" ends within the grace period; its outcome cannot be reported
    runner.join(30)  # a bound: grace 3s + a few calls of SHUTDOWN_CALL_TIMEOUT
    assert not runner.is_alive(), "the worker did not stop"
    assert gone.interrupted == [SHUTDOWN_CALL_TIMEOUT]
    assert not child.alive()
    assert "complete" in gone.calls_while_gone and "release" in gone.calls_while_gone
    assert gone.completed == {} and gone.released == []


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
        # Fenced before its lease could expire, and reported (best effort) as failed.
        success, _, message = silent.completed[a.key]
        assert not success and message.startswith("worker lost contact with the cluster for")
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
