"""Worker self-fencing against the in-memory FakeTransport of ``test_worker_loop``: a worker
whose heartbeats hang kills its attempt before the lease can expire and reports it as failed;
accepted heartbeats push the supervisor's fence on; a lease granted late in a long poll is
confirmed before it starts; the config refuses a heartbeat interval that leaves no room."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from test_worker_loop import FakeTransport, Process, task, wait_idle

from raftsched.config import fence_margin, load_config
from raftsched.core.model import TaskKey
from raftsched.errors import ConfigError
from raftsched.worker.loop import SUPERVISOR_LAG, Worker, WorkerSettings

pytestmark = pytest.mark.timeout(60)


class Hanging(FakeTransport):
    """Once ``cut``, every heartbeat and complete hangs until ``heal`` (a cut-off network:
    no answer, no error), and is then answered."""

    def __init__(self) -> None:
        super().__init__()
        self.cut = threading.Event()
        self.healed = threading.Event()
        self.hanging = 0

    def _hang(self) -> None:
        if self.cut.is_set():
            with self.cond:
                self.hanging += 1
                self.cond.notify_all()
            self.healed.wait(30)

    def heartbeat(
        self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]
    ) -> dict[TaskKey, bool]:
        self._hang()
        return super().heartbeat(worker_id, leases)

    def complete(
        self, key: TaskKey, token: int, *, success: bool, exit_code: int | None, message: str
    ) -> bool:
        self._hang()
        return super().complete(key, token, success=success, exit_code=exit_code, message=message)


def test_hanging_heartbeats_fence_the_attempt_before_its_lease_expires(tmp_path: Path) -> None:
    hanging = Hanging()
    settings = WorkerSettings(concurrency=1, lease_ttl=3, heartbeat_interval=0.2, lease_wait=0.1)
    worker = Worker(hanging, settings, worker_id="w1")  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    pid_file = tmp_path / "pid"
    a = task("cut", f"sleep 1000 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait")
    try:
        hanging.offer(a)
        assert hanging.wait_for(pid_file.exists)
        child = Process(int(pid_file.read_text()))
        assert hanging.wait_for(lambda: len(hanging.heartbeats) >= 2)  # accepted ones
        cut = time.monotonic()
        hanging.cut.set()
        assert hanging.wait_for(lambda: not child.alive(), timeout=10)
        took = time.monotonic() - cut
        # last accepted heartbeat sent at most one interval (+ the call) before the cut
        assert took < settings.lease_ttl - fence_margin(settings.lease_ttl) + 0.5, took
        assert hanging.wait_for(lambda: hanging.hanging >= 2)  # beats kept going, in parallel
        hanging.healed.set()
        assert hanging.wait_for(lambda: a.key in hanging.completed)
        success, _, message = hanging.completed[a.key]
        assert not success
        assert message.startswith("worker lost contact with the cluster for"), message
        assert "killed its attempt before its lease could expire" in message
        assert wait_idle(worker)
    finally:
        hanging.healed.set()
        worker.stop()
        runner.join(30)


def test_accepted_heartbeats_push_the_supervisors_fence_on(tmp_path: Path) -> None:
    transport = FakeTransport()
    settings = WorkerSettings(concurrency=1, lease_ttl=3, heartbeat_interval=0.1, lease_wait=0.1)
    worker = Worker(transport, settings, worker_id="w1")  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    gate = tmp_path / "gate"
    a = task("long", f"until [ -e {gate} ]; do sleep 0.05; done")
    try:
        transport.offer(a)
        assert transport.wait_for(lambda: len(worker.running) == 1)
        time.sleep(3.5)  # past the first fence: alive only because heartbeats extend it
        running = next(iter(worker._running.values()))
        assert not running.attempt.fenced and not running.fenced
        deadline = running.attempt.deadline
        assert deadline is not None
        assert abs(deadline - (running.last_ok + worker.window + SUPERVISOR_LAG)) < 1e-6
        assert time.monotonic() - running.last_ok < 1.0
        gate.touch()
        assert transport.wait_for(lambda: a.key in transport.completed)
        assert transport.completed[a.key] == (True, 0, "")
    finally:
        worker.stop()
        runner.join(30)


def test_a_lease_granted_late_in_a_long_poll_is_confirmed_before_it_starts() -> None:
    class SlowGrant(FakeTransport):
        """Grants come 2.5s into the poll: with lease_ttl 3 (fence at 2s), too late to trust
        the poll's send time."""

        def lease(self, worker_id: str, max_tasks: int, wait_seconds: float) -> list:  # type: ignore[type-arg]
            taken = super().lease(worker_id, max_tasks, wait_seconds)
            if taken:
                time.sleep(2.5)
            return taken

    slow = SlowGrant()
    settings = WorkerSettings(concurrency=1, lease_ttl=3, heartbeat_interval=0.5, lease_wait=0.1)
    worker = Worker(slow, settings, worker_id="w1")  # type: ignore[arg-type]
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    a = task("late", "sleep 2")  # outlives the poll-based fence: alive thanks to the confirm
    try:
        slow.offer(a)
        assert slow.wait_for(lambda: a.key in slow.completed)
        assert slow.heartbeats[0] == [(a.key, a.token)]  # the confirm came first
        assert slow.completed[a.key] == (True, 0, "")
    finally:
        worker.stop()
        runner.join(30)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[worker]\nlease_ttl = 3\nheartbeat_interval = 1\n", ""),  # room 2 = 2 x 1
        ("[worker]\nlease_ttl = 2\nheartbeat_interval = 0.5\n", ""),  # room 1 = 2 x 0.5
        ("[worker]\nlease_ttl = 30\nheartbeat_interval = 12\n", ""),  # room 24
        (
            "[worker]\nlease_ttl = 3\nheartbeat_interval = 1.01\n",
            "[worker] heartbeat_interval = '1.01': expected 2 x heartbeat_interval <= lease_ttl"
            " - max(1, 20% of lease_ttl) (they are 1.01 and 3): a worker kills an attempt it"
            " could not heartbeat for 2s, so at least two heartbeats must fit in that time",
        ),
        (
            "[worker]\nlease_ttl = 30\nheartbeat_interval = 13\n",
            "[worker] heartbeat_interval = '13': expected 2 x heartbeat_interval <= lease_ttl",
        ),
        (  # the older rule still speaks first when it applies
            "[worker]\nheartbeat_interval = 30\n",
            "[worker] heartbeat_interval = '30': expected heartbeat_interval < lease_ttl",
        ),
    ],
)
def test_the_config_leaves_room_for_two_heartbeats_before_the_fence(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "given.cfg"
    path.write_text(text)
    env = {"RAFTSCHED_HOME": str(tmp_path / "home")}
    if not expected:
        load_config(path, env=env)
        return
    with pytest.raises(ConfigError) as info:
        load_config(path, env=env)
    assert str(info.value).startswith(f"{path}: {expected}"), str(info.value)


def test_the_margin() -> None:
    assert fence_margin(30) == 6 and fence_margin(4) == 1 and fence_margin(600) == 120
    assert fence_margin(0.5) == 0.25  # test-only TTLs: half of it
