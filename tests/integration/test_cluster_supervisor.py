"""The supervisor behind `raftsched standalone`, with small real child processes."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from raftsched.standalone.supervisor import ChildSpec, RestartPolicy, Supervisor

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', flush=True); time.sleep(60)",
]
CRASHER = [sys.executable, "-c", "import sys; print('boom', flush=True); sys.exit(3)"]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _until(check, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_start_and_stop_every_child(tmp_path: Path) -> None:
    specs = [ChildSpec(f"c{i}", SLEEPER, tmp_path / f"c{i}.log") for i in range(3)]
    sup = Supervisor(specs, report=lambda _m: None)
    try:
        sup.start()
        pids = sup.pids()
        assert len(pids) == 3
        assert not any(_gone(pid) for pid in pids.values())
    finally:
        sup.stop()
    assert all(_gone(pid) for pid in pids.values())
    assert "stopped (exit -15)" in (tmp_path / "c0.log").read_text()


def test_stop_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    sup = Supervisor([ChildSpec("stubborn", STUBBORN, log)], stop_timeout=1.0, report=print)
    try:
        sup.start()
        assert _until(lambda: "ready" in log.read_text().splitlines())
        pid = sup.pids()["stubborn"]
    finally:
        sup.stop()
    assert _gone(pid)
    assert "stopped (exit -9)" in log.read_text()


def test_dead_child_is_reported_and_restarted_then_given_up(tmp_path: Path) -> None:
    reports: list[str] = []
    policy = RestartPolicy(max_restarts=2, window_seconds=60, backoff_initial=0.05)
    sup = Supervisor(
        [ChildSpec("crasher", CRASHER, tmp_path / "crasher.log")],
        policy=policy,
        report=reports.append,
    )
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(sup.run(interval=0.02)))
    sup.start()
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert done == [1]  # every child given up on
    assert sum("restarting in" in r for r in reports) == 2
    assert any("giving up" in r for r in reports)
    assert (tmp_path / "crasher.log").read_text().splitlines().count("boom") == 3


def test_request_stop_ends_run_with_zero(tmp_path: Path) -> None:
    sup = Supervisor([ChildSpec("s", SLEEPER, tmp_path / "s.log")], report=lambda _m: None)
    sup.start()
    pid = sup.pids()["s"]
    timer = threading.Timer(0.3, sup.request_stop)
    timer.start()
    assert sup.run(interval=0.02) == 0
    assert _gone(pid)


def test_backoff_grows_and_is_capped() -> None:
    policy = RestartPolicy(backoff_initial=1, backoff_max=10)
    assert [policy.backoff(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_config_error_is_not_restarted(tmp_path: Path) -> None:
    reports: list[str] = []
    usage_error = [sys.executable, "-c", "import sys; sys.exit(2)"]
    sup = Supervisor([ChildSpec("bad", usage_error, tmp_path / "bad.log")], report=reports.append)
    sup.start()
    assert sup.run(interval=0.02) == 1
    assert len(reports) == 2 and "not restarting" in reports[0], reports
