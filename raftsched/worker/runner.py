"""Runs one task attempt in a subprocess and says how it ended.

- BashTask: ``bash -c COMMAND``. PythonTask: the function is called in a fork of a warm
  process that has the DAG file imported (a fork server per DAG file and version, see
  ``supervisor.py``); cold (``python -m raftsched.worker._run_python``, kwargs as JSON on its
  stdin) when the file has no usable fork server.
- Environment (``raftsched/taskenv.py``): the worker's own, less what
  ``[worker] task_env_allowlist`` does not allow (its token, the cluster secret, the DB
  URL...), then the task's ``env``, then the ``RAFTSCHED_*`` variables
  (``Assignment.task_env``). The working directory is a fresh temporary folder, removed
  after. With ``[worker] run_as_user`` (``task_user.py``) the task runs as that user, the
  folder is its own and its HOME.
- On Linux every attempt is forked by the worker's one long-lived supervisor under a guard
  (``_guard.py``: the leader of the attempt's session and process group, the task its child)
  that kills the whole attempt when the worker dies, SIGKILL included (invariant 2: no orphan
  beside the retry; the supervisor dies with the worker, and each guard with the supervisor),
  and kills what the task left behind, escaped daemons included, when the task ends. Exit
  codes and signals are still the task's own. Elsewhere the task is a plain child process in a
  session of its own (no guard).
- ``execution_timeout``: SIGTERM to the group, ``kill_grace`` s later SIGKILL to all of it.
- :meth:`Attempt.kill` (lease refused, worker shutting down): the whole attempt is killed at
  once; the outcome is marked ``killed`` and the caller does not report it.
- ``deadline`` / :meth:`Attempt.extend` (Linux): the attempt's lease fence, kept by the
  supervisor (or the DAG file's fork server), which kills the attempt when it passes without
  an extension, whatever the worker is doing (frozen, cut off); :attr:`Attempt.fenced` then
  says so. Elsewhere it is ignored: the worker's own watchdog is the only fence.
- When the attempt ends the pipes are drained for at most ``DRAIN_SECONDS``.
- stdout/stderr are read as they come, masked (values read on demand too: ``add_masked``),
  and handed to ``sink(stream, text)``; the last line of stderr becomes the failure message.
  Decoded as ``limits.clean_bytes`` would decode the whole stream (incrementally: a character
  split between two reads survives): invalid UTF-8 and NUL become U+FFFD.
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
from typing import Any, BinaryIO

import raftsched
from raftsched import taskenv
from raftsched.core import limits
from raftsched.dags.templating import render_assignment
from raftsched.errors import TemplateError, XComError
from raftsched.secrets import StreamMasker
from raftsched.worker import results, task_user
from raftsched.worker.attempt_process import _Plain, _Supervised
from raftsched.worker.executor import executor
from raftsched.worker.task_secrets import masked_values
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
    result_json: str = ""  # its return value (XCom) as JSON text (worker.results)
    follow: tuple[str, ...] | None = None  # a branch's choice
    skipped: bool = False  # success that ends SKIPPED (skip exit code, TaskSkipped)
    defer: dict[str, Any] | None = None  # it deferred (worker.results): reported with Defer
    outlet_extras: tuple[tuple[str, str], ...] = ()  # (URI, extra JSON): worker.results

    def results(self) -> dict[str, Any]:
        """What complete() takes beyond the outcome: only what is set (fakes stay simple)."""
        out: dict[str, Any] = {"result_json": self.result_json} if self.result_json else {}
        if self.follow is not None:
            out["follow"] = self.follow
        out.update({"skipped": True} if self.skipped else {})
        out.update({"outlet_extras": self.outlet_extras} if self.outlet_extras else {})
        return out


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


GUARD = str(Path(__file__).with_name("_guard.py"))
GUARDED = sys.platform.startswith("linux")  # prctl(PR_SET_PDEATHSIG): elsewhere, no guard


def held_lease(a: Assignment) -> dict[str, Any]:
    """What the supervisor's death report needs of a lease (see ``_last_words``)."""
    k = a.key
    return {"dag_id": k.dag_id, "run_id": k.run_id, "task_id": k.task_id, "token": a.token}


def guarded(command: list[str], worker_pid: int) -> list[str]:
    """``command`` under the guard script, which watches ``worker_pid`` (see ``_guard.py``)."""
    return [sys.executable, "-I", "-S", GUARD, str(worker_pid), "--", *command]


def command_for(assignment: Assignment) -> list[str]:
    """The command of a cold attempt (a PythonTask without a fork server, no supervisor)."""
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
    """The attempt's environment: ``base`` (default: the allowed part of the worker's own),
    then the task's ``env``, then its ``RAFTSCHED_*`` variables."""
    env = taskenv.scrubbed() if base is None else dict(base)
    env.update(dict(assignment.env))
    env.update(assignment.task_env())
    env.update(dict(assignment.secret_env))  # declared variables/connections (task_secrets)
    if assignment.kind == "python":
        root = str(Path(raftsched.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"  # so its output streams while it runs
    return env


class Attempt:
    """One attempt's process. ``run()`` blocks until it ends; ``kill()`` may come from any
    thread at any time (also before ``run()``: the attempt then never starts)."""

    def __init__(
        self,
        assignment: Assignment,
        sink: Sink,
        *,
        kill_grace: float = KILL_GRACE,
        deadline: float | None = None,
    ) -> None:
        self.assignment = assignment
        self.sink = sink
        self.kill_grace = kill_grace
        self.deadline = deadline  # the lease fence (time.monotonic()); None: none
        self.proc: _Supervised | _Plain | None = None
        self.kill_reason: str | None = None
        self._lock = threading.Lock()
        self._last_stderr = ""
        self._partial_stderr = ""
        self._maskers: dict[str, StreamMasker] = {}  # per stream, made when the attempt runs
        self._read_values: list[str] = []  # read on demand (add_masked): masked from then on

    @property
    def pid(self) -> int | None:
        """The attempt's leader: its guard (Linux), or the task itself."""
        return self.proc.pid if self.proc is not None else None

    def kill(self, reason: str) -> None:
        """Kill the whole attempt now; the outcome will be ``killed``."""
        with self._lock:
            if self.kill_reason is None:
                self.kill_reason = reason
            self._signal_group(signal.SIGKILL)

    def extend(self, deadline: float) -> None:
        """Move the lease fence on: the supervisor kills the attempt at ``deadline``
        (``time.monotonic()``) unless extended again."""
        with self._lock:
            if self.deadline is not None and deadline <= self.deadline:
                return
            self.deadline = deadline
            if self.proc is not None and self.kill_reason is None:
                self.proc.extend(deadline)

    @property
    def fenced(self) -> bool:
        """Whether its supervisor killed it because the fence passed."""
        proc = self.proc
        return proc is not None and proc.fenced

    def _signal_group(self, signum: int) -> None:
        if self.proc is not None:
            self.proc.signal(signum)

    def run(self) -> Outcome:
        workdir = tempfile.mkdtemp(prefix="raftsched-attempt-")
        try:
            try:
                task_user.give_workdir(workdir, task_user.current())
            except OSError as error:
                return Outcome(False, None, f"cannot start the task: {error}")
            if self.kill_reason is not None:
                return Outcome(False, None, self.kill_reason, killed=True)
            try:  # its templates, before anything else sees its command, env or kwargs
                self.assignment = render_assignment(self.assignment)
            except TemplateError as error:  # fails the attempt, never the worker
                self._emit(STDERR, limits.clean_text(f"{error}\n"))
                return Outcome(False, None, limits.clean_text(str(error)))
            try:  # XCom arguments after the templates: a return value is never rendered
                self.assignment = results.with_upstream_results(self.assignment)
            except XComError as error:
                self._emit(STDERR, limits.clean_text(f"{error}\n"))
                return Outcome(False, None, limits.clean_text(str(error)))
            values = masked_values(self.assignment)  # its secret values never leave unmasked
            self._maskers = {s: StreamMasker(values) for s in (STDOUT, STDERR)}
            with self._lock:
                deadline = self.deadline
            try:
                proc, out, err = self._start(workdir, deadline)
            except (OSError, ValueError) as error:
                return Outcome(False, None, f"cannot start the task: {error}")
            with self._lock:
                self.proc = proc
                if self.kill_reason is not None:  # killed while it started
                    self._signal_group(signal.SIGKILL)
                elif self.deadline is not None and self.deadline != deadline:
                    proc.extend(self.deadline)  # extended while it started
            return self._settle(self._supervise(out, err), workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _settle(self, outcome: Outcome, workdir: str) -> Outcome:
        """The outcome with what the result file says (``results.settle_outcome``). Under
        ``run_as_user`` the working directory is the task's, so whatever stands where the
        result file goes may be a link to a file only the worker may read, or a FIFO: it is
        read without following a link or blocking, a regular file only, within its bound
        (``xcom_args.read_bounded``)."""
        return results.settle_outcome(outcome, self.assignment, workdir, self._read_values)

    def add_masked(self, values: list[str]) -> None:
        """Mask ``values`` (what an on-demand read gave the task: ``worker/secret_channel.py``)
        in its output from now on, and in its outcome."""
        self._read_values += values
        for masker in list(self._maskers.values()):
            masker.add(values)

    def _start(
        self, workdir: str, deadline: float | None = None
    ) -> tuple[_Supervised | _Plain, BinaryIO, BinaryIO]:
        a = self.assignment
        if not GUARDED:
            return self._start_plain(workdir)
        if a.kind not in ("bash", "python"):
            raise ValueError(f"unknown task kind {a.kind!r}: expected 'bash' or 'python'")
        user = task_user.current()
        env = {**environment_for(a), **results.result_env(a, workdir)}
        if user is not None:
            env.update(user.environment(workdir))
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            handle = executor().spawn(
                kind=a.kind,
                env=env,
                cwd=workdir,
                stdout=out_w,
                stderr=err_w,
                command=a.command,
                fileloc=a.fileloc,
                callable_name=a.callable_name,
                kwargs=a.kwargs,
                deadline=deadline,
                user=user.wire() if user is not None else None,
            )
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        return _Supervised(handle), open(out_r, "rb", 0), open(err_r, "rb", 0)

    def _start_plain(self, workdir: str) -> tuple[_Plain, BinaryIO, BinaryIO]:
        a = self.assignment
        python = a.kind == "python"
        proc = subprocess.Popen(
            command_for(a),
            stdin=subprocess.PIPE if python else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**environment_for(a), **results.result_env(a, workdir)},
            cwd=workdir,
            start_new_session=True,
        )
        if python:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # it died at once: its stderr says why
                proc.stdin.write(json.dumps(dict(a.kwargs)).encode())
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        assert proc.stdout is not None and proc.stderr is not None
        return _Plain(proc), proc.stdout, proc.stderr

    def _supervise(self, out: BinaryIO, err: BinaryIO) -> Outcome:
        proc = self.proc
        assert proc is not None
        timeout = self.assignment.execution_timeout
        start = time.monotonic()
        deadline = start + timeout if timeout else None
        term_sent_at: float | None = None
        killed_at: float | None = None
        drain_until: float | None = None
        decoders = {
            STDOUT: codecs.getincrementaldecoder("utf-8")("replace"),
            STDERR: codecs.getincrementaldecoder("utf-8")("replace"),
        }
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(out, selectors.EVENT_READ, STDOUT)
                sel.register(err, selectors.EVENT_READ, STDERR)
                while True:
                    if sel.get_map():
                        self._read(sel, decoders)
                    else:  # it closed both pipes but may still run
                        proc.wait_exit(POLL)
                    now = time.monotonic()
                    if deadline is not None and term_sent_at is None and now >= deadline:
                        term_sent_at = now
                        self._signal_group(signal.SIGTERM)
                    if (
                        term_sent_at is not None
                        and killed_at is None
                        and now >= term_sent_at + self.kill_grace
                    ):
                        killed_at = now
                        self._signal_group(signal.SIGKILL)
                    if proc.exited():
                        if drain_until is None:
                            self._signal_group(signal.SIGKILL)  # no guard: what it left behind
                            drain_until = now + DRAIN_SECONDS
                        if not sel.get_map() or now >= drain_until:
                            break  # read to the end, or an escaped process holds a pipe
            returncode, error = proc.wait()
        finally:
            out.close()
            err.close()
        if error is not None and self.kill_reason is None:
            return Outcome(False, None, error)
        return self._outcome(
            returncode if returncode is not None else -signal.SIGKILL,
            timed_out=term_sent_at is not None,
            timeout=timeout,
        )

    def _read(self, sel: selectors.BaseSelector, decoders: dict[str, Any]) -> None:
        for sk, _ in sel.select(POLL):
            data = os.read(sk.fd, READ_BYTES)
            if not data:
                sel.unregister(sk.fileobj)
            text = decoders[sk.data].decode(data, final=not data)
            masker = self._maskers.get(sk.data)
            if masker is not None:  # before anything keeps it (the outcome message too)
                text = masker.feed(text) + (masker.flush() if not data else "")
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
