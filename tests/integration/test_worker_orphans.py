"""A worker killed with SIGKILL leaves no attempt behind (invariant 2: one holder per attempt).

Real processes: a child Python process stands in for the worker and runs an ``Attempt`` of a
bash task that starts a grandchild and a daemon that left its session; the test SIGKILLs that
"worker" and waits, bounded, for every task process to be gone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from harness import alive, wait_until

from raftsched.core.model import TaskKey
from raftsched.worker.logs import LogBuffer
from raftsched.worker.runner import GUARDED, Attempt, guarded
from raftsched.worker.transport import Assignment

pytestmark = pytest.mark.skipif(not GUARDED, reason="the attempt guard needs Linux (prctl)")

KEY = TaskKey("etl", "manual__1", "load")
ROOT = Path(__file__).resolve().parents[2]


def bash(command: str) -> Assignment:
    return Assignment(key=KEY, token=5, try_number=1, kind="bash", command=command)


def pid_files_script(folder: Path) -> str:
    """Writes the shell's PID, a grandchild's and an escaped daemon's, then waits; prints
    nothing (an orphan that writes would die of SIGPIPE and hide the bug)."""
    return (
        f"sleep 300 & echo $! > {folder}/grandchild.tmp; mv {folder}/grandchild.tmp"
        f" {folder}/grandchild;"
        f" setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {folder}/daemon.tmp;"
        f" mv {folder}/daemon.tmp {folder}/daemon;"
        f" echo $$ > {folder}/shell.tmp; mv {folder}/shell.tmp {folder}/shell; wait"
    )


def read_pids(folder: Path) -> dict[str, int]:
    return {
        name: int((folder / name).read_text())
        for name in ("shell", "grandchild", "daemon")
        if (folder / name).exists()
    }


def kill_leftovers(pids: dict[str, int]) -> None:
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(60)
def test_sigkill_of_the_worker_kills_the_whole_attempt(tmp_path: Path) -> None:
    worker_code = textwrap.dedent(
        f"""
        from raftsched.core.model import TaskKey
        from raftsched.worker.runner import Attempt
        from raftsched.worker.transport import Assignment

        a = Assignment(key=TaskKey("etl", "manual__1", "load"), token=5, try_number=1,
                       kind="bash", command={pid_files_script(tmp_path)!r})
        Attempt(a, lambda stream, text: None).run()
        """
    )
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    worker = subprocess.Popen([sys.executable, "-c", worker_code], env=env)
    pids: dict[str, int] = {}
    try:
        assert wait_until(lambda: len(read_pids(tmp_path)) == 3, timeout=30), read_pids(tmp_path)
        pids = read_pids(tmp_path)
        assert all(alive(pid) for pid in pids.values())
        worker.kill()
        worker.wait(10)
        assert wait_until(lambda: not any(alive(pid) for pid in pids.values())), {
            name: pid for name, pid in pids.items() if alive(pid)
        }
    finally:
        worker.kill()
        worker.wait(10)
        kill_leftovers(pids or read_pids(tmp_path))


def test_a_daemon_that_left_the_session_dies_when_the_task_ends(tmp_path: Path) -> None:
    pid_file = tmp_path / "daemon"
    outcome = Attempt(
        bash(f"setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {pid_file}; exit 0"),
        LogBuffer().write,
    ).run()
    try:
        assert outcome.success
        assert wait_until(lambda: not alive(int(pid_file.read_text())))
    finally:
        kill_leftovers(read_pids(tmp_path))


def test_the_guard_passes_on_the_tasks_own_exit_status() -> None:
    outcome = Attempt(bash("echo nope >&2; exit 5"), LogBuffer().write).run()
    assert (outcome.success, outcome.exit_code, outcome.message) == (False, 5, "nope")

    outcome = Attempt(bash("kill -TERM $$"), LogBuffer().write).run()
    assert (outcome.exit_code, outcome.message) == (143, "killed by SIGTERM")


def test_a_command_the_guard_cannot_start_exits_127_with_a_message() -> None:
    done = subprocess.run(
        guarded(["/nonexistent/raftsched-task"], os.getpid()), capture_output=True, timeout=30
    )
    assert done.returncode == 127
    assert done.stderr.decode().startswith("cannot start the task:")
