"""Runs one task attempt in a subprocess and says how it ended.

- BashTask: ``bash -c COMMAND``. PythonTask: ``python -m raftsched.worker._run_python`` imports
  the DAG file and calls the function (kwargs arrive as JSON on its stdin).
- Environment: the worker's own, then the task's ``env``, then the ``RAFTSCHED_*`` variables
  (``Assignment.task_env``). The working directory is a fresh temporary folder, removed after.
- Each attempt leads its own session and process group, so every signal goes to the group:
  whatever the task started dies with it.
- On Linux the command runs under a guard (``_guard.py``, the group's leader, CMD its child)
  that kills the whole attempt when the worker dies, SIGKILL included (invariant 2: no orphan
  beside the retry), and kills what escaped the group when the task ends. Its parent-death
  signal is tied to the thread that forks it: the thread in :meth:`Attempt.run`, which returns
  only once the guard is reaped. Exit codes and signals are still the task's own.
- ``execution_timeout``: SIGTERM to the group, SIGKILL ``kill_grace`` seconds later; the
  attempt fails with "execution_timeout of Ns exceeded".
- :meth:`Attempt.kill` (lease refused, worker shutting down): SIGKILL to the group at once; the
  outcome is marked ``killed`` and the caller does not report it.
- When the main process exits, anything it left behind in its group is killed and the pipes
  are drained for at most ``DRAIN_SECONDS`` (a process that left the group may hold them).
- stdout/stderr are read as they come and handed to ``sink(stream, text)``; the last line of
  stderr becomes the failure message. The bytes are decoded as ``limits.clean_bytes`` would
  decode the whole stream (an incremental decoder, so a character split between two reads
  survives): invalid UTF-8 and NUL become U+FFFD, so no task output can reach the cluster as
  text a database refuses.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import raftsched
from raftsched.core import limits
from raftsched.worker.transport import STDERR, STDOUT, Assignment

READ_BYTES = 65536
KILL_GRACE = 5.0  # seconds between SIGTERM and SIGKILL on execution_timeout
DRAIN_SECONDS = 2.0
POLL = 0.1
MESSAGE_LIMIT = 1000

Sink = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class Outcome:
    success: bool
    exit_code: int | None
    message: str
    killed: bool = False  # killed on purpose by kill(): not to be reported


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


GUARD = str(Path(__file__).with_name("_guard.py"))
GUARDED = sys.platform.startswith("linux")  # prctl(PR_SET_PDEATHSIG): elsewhere, no guard


def guarded(command: list[str], worker_pid: int) -> list[str]:
    """``command`` under the guard, which watches ``worker_pid`` (see ``_guard.py``)."""
    return [sys.executable, "-I", "-S", GUARD, str(worker_pid), "--", *command]


def command_for(assignment: Assignment) -> list[str]:
    if assignment.kind == "bash":
        return ["bash", "-c", assignment.command]
    if assignment.kind == "python":
        return [
            sys.executable,
            "-m",
            "raftsched.worker._run_python",
            assignment.fileloc,
            assignment.callable_name,
        ]
    raise ValueError(f"unknown task kind {assignment.kind!r}: expected 'bash' or 'python'")


def environment_for(assignment: Assignment, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(dict(assignment.env))
    env.update(assignment.task_env())
    if assignment.kind == "python":
        root = str(Path(raftsched.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"  # so its output streams while it runs
    return env


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process has exited, without reaping it (so its group id stays reserved)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True


class Attempt:
    """One attempt's process. ``run()`` blocks until it ends; ``kill()`` may come from any
    thread at any time (also before ``run()``: the attempt then never starts)."""

    def __init__(
        self, assignment: Assignment, sink: Sink, *, kill_grace: float = KILL_GRACE
    ) -> None:
        self.assignment = assignment
        self.sink = sink
        self.kill_grace = kill_grace
        self.proc: subprocess.Popen[bytes] | None = None
        self.kill_reason: str | None = None
        self._lock = threading.Lock()
        self._last_stderr = ""
        self._partial_stderr = ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def kill(self, reason: str) -> None:
        """SIGKILL the whole process group now; the outcome will be ``killed``."""
        with self._lock:
            if self.kill_reason is None:
                self.kill_reason = reason
            self._signal_group(signal.SIGKILL)

    def _signal_group(self, signum: int) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return  # not started, or reaped: its group id may belong to someone else now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    def run(self) -> Outcome:
        workdir = tempfile.mkdtemp(prefix="raftsched-attempt-")
        try:
            with self._lock:
                if self.kill_reason is not None:
                    return Outcome(False, None, self.kill_reason, killed=True)
                try:
                    self.proc = self._start(workdir)
                except (OSError, ValueError) as err:
                    return Outcome(False, None, f"cannot start the task: {err}")
            return self._supervise()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _start(self, workdir: str) -> subprocess.Popen[bytes]:
        a = self.assignment
        python = a.kind == "python"
        command = command_for(a)
        proc = subprocess.Popen(
            guarded(command, os.getpid()) if GUARDED else command,
            stdin=subprocess.PIPE if python else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment_for(a),
            cwd=workdir,
            start_new_session=True,
        )
        if python:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # it died at once: its stderr says why
                proc.stdin.write(json.dumps(dict(a.kwargs)).encode())
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        return proc

    def _supervise(self) -> Outcome:
        proc = self.proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        timeout = self.assignment.execution_timeout
        start = time.monotonic()
        deadline = start + timeout if timeout else None
        term_sent_at: float | None = None
        drain_until: float | None = None
        decoders = {
            STDOUT: codecs.getincrementaldecoder("utf-8")("replace"),
            STDERR: codecs.getincrementaldecoder("utf-8")("replace"),
        }
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, STDOUT)
            sel.register(proc.stderr, selectors.EVENT_READ, STDERR)
            while True:
                if sel.get_map():
                    self._read(sel, decoders)
                else:  # it closed both pipes but may still run
                    time.sleep(POLL)
                now = time.monotonic()
                if deadline is not None and term_sent_at is None and now >= deadline:
                    term_sent_at = now
                    self._signal_group(signal.SIGTERM)
                if term_sent_at is not None and now >= term_sent_at + self.kill_grace:
                    self._signal_group(signal.SIGKILL)
                if _exited(proc):
                    if drain_until is None:
                        self._signal_group(signal.SIGKILL)  # whatever it left in its group
                        drain_until = now + DRAIN_SECONDS
                    if not sel.get_map() or now >= drain_until:
                        break  # read to the end, or a process outside the group holds a pipe
        with self._lock:  # the leader is a zombie until reaped: its group id stays ours
            self._signal_group(signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        return self._outcome(proc.returncode, timed_out=term_sent_at is not None, timeout=timeout)

    def _read(self, sel: selectors.BaseSelector, decoders: dict[str, Any]) -> None:
        for sk, _ in sel.select(POLL):
            data = os.read(sk.fd, READ_BYTES)
            if not data:
                sel.unregister(sk.fileobj)
            text = decoders[sk.data].decode(data, final=not data)
            self._emit(sk.data, limits.clean_text(text))  # NUL -> U+FFFD

    def _emit(self, stream: str, text: str) -> None:
        if not text:
            return
        if stream == STDERR:
            lines = (self._partial_stderr + text).split("\n")
            self._partial_stderr = lines[-1][-MESSAGE_LIMIT:]
            complete = [line for line in lines[:-1] if line.strip()]
            if complete:
                self._last_stderr = complete[-1][-MESSAGE_LIMIT:]
        self.sink(stream, text)

    def _outcome(self, returncode: int, *, timed_out: bool, timeout: float | None) -> Outcome:
        exit_code = 128 - returncode if returncode < 0 else returncode  # shell convention
        if self.kill_reason is not None:
            return Outcome(False, exit_code, self.kill_reason, killed=True)
        if timed_out and timeout is not None:
            return Outcome(
                False, exit_code, f"execution_timeout of {_format_seconds(timeout)} exceeded"
            )
        if returncode == 0:
            return Outcome(True, 0, "")
        last = (self._partial_stderr.strip() or self._last_stderr).strip()
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            return Outcome(False, exit_code, last or f"killed by {name}")
        return Outcome(False, exit_code, last or f"exit code {exit_code}")
