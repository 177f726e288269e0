"""The process of one attempt, as ``runner.Attempt`` drives it: :class:`_Supervised` (Linux:
its guard, forked by the task supervisor, through an ``executor.Handle``) or :class:`_Plain`
(elsewhere: a plain child process in a session of its own, no guard). Both answer the same
calls: pid, exited, wait_exit, extend, fenced, signal, wait.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

from raftsched.worker.executor import Handle


class _Supervised:
    """An attempt the supervisor runs (Linux): its guard's handle."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    @property
    def pid(self) -> int | None:
        return self.handle.pid

    def exited(self) -> bool:
        return self.handle.exited()

    def wait_exit(self, timeout: float) -> None:
        self.handle.wait(timeout)

    def extend(self, deadline: float) -> None:
        self.handle.extend(deadline)

    @property
    def fenced(self) -> bool:
        return self.handle.fenced

    def signal(self, signum: int) -> None:
        if signum == signal.SIGKILL:
            self.handle.kill()  # the guard kills the session, escaped daemons included
        else:
            self.handle.signal(signum)

    def wait(self) -> tuple[int | None, str | None]:
        self.handle.wait()
        if self.handle.status is None:
            return None, self.handle.error or "the task could not be run"
        return os.waitstatus_to_exitcode(self.handle.status), None


class _Plain:
    """An attempt as a plain child process in a session of its own (no guard: not Linux)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def exited(self) -> bool:
        """Whether it has exited, without reaping it (so its group id stays reserved)."""
        if self.proc.returncode is not None:
            return True
        try:
            return (
                os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
            )
        except ChildProcessError:
            return True

    def wait_exit(self, timeout: float) -> None:
        if not self.exited():
            time.sleep(timeout)

    def extend(self, deadline: float) -> None:
        pass  # no supervisor: the worker's watchdog is the only fence

    fenced = False

    def signal(self, signum: int) -> None:
        with self.lock:
            if self.proc.returncode is None:  # reaped: its group id may be someone else's now
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signum)

    def wait(self) -> tuple[int | None, str | None]:
        self.signal(signal.SIGKILL)  # whatever it left in its group; a zombie keeps the id
        with self.lock:
            return self.proc.wait(), None
