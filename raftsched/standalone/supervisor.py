"""Run a fixed set of child processes: start them, restart the ones that die, stop them all.

The supervisor behind ``raftsched standalone``. Each child runs in its own session (so a
Ctrl-C in the terminal reaches only the supervisor, which then stops the children in order)
with its stdout and stderr appended to its own log file, and — on Linux — asks the kernel to
send it SIGTERM should the supervisor die without cleaning up.

Contract:
- ``start()`` starts every child; ``run()`` supervises until ``request_stop()`` (safe to call
  from a signal handler) and then stops everything; ``stop()`` may also be called directly and
  is idempotent.
- A child that exits while no stop was requested is reported and restarted after a backoff
  (``RestartPolicy``): 1 s, 2 s, 4 s ... up to ``backoff_max``; the backoff resets once a child
  has run for ``stable_after`` seconds. A child that needs more than ``max_restarts`` restarts
  within ``window_seconds`` is given up on (reported, not restarted again), and so is one
  whose exit status says a restart cannot help (2: a usage or config error).
- Stopping sends SIGTERM to every child, waits up to ``stop_timeout`` seconds in total, then
  sends SIGKILL to what is left and reaps it. No child outlives ``stop()``.
- Not thread-safe: call ``start``/``poll``/``run``/``stop`` from one thread (the one that
  started the children, because the parent-death signal is tied to that thread).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from raftsched import retry

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ChildSpec:
    """What to run: a name for reports, the command line, where its output goes."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None  # None: inherit the supervisor's environment
    cwd: Path | None = None


@dataclass(frozen=True)
class RestartPolicy:
    restart: bool = True
    max_restarts: int = 5
    window_seconds: float = 300.0
    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    stable_after: float = 60.0
    # Exit statuses that no restart can fix (raftsched exits 2 on a usage or config error).
    fatal_exit_codes: tuple[int, ...] = (2,)

    def backoff(self, consecutive_failures: int) -> float:
        """Delay before restart number ``consecutive_failures`` (1-based)."""
        return retry.backoff(
            consecutive_failures, initial=self.backoff_initial, maximum=self.backoff_max
        )


@dataclass
class _Child:
    spec: ChildSpec
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    consecutive_failures: int = 0
    restart_times: deque[float] = field(default_factory=deque)
    restart_at: float | None = None
    gave_up: bool = False


class Supervisor:
    def __init__(
        self,
        specs: Sequence[ChildSpec],
        *,
        policy: RestartPolicy | None = None,
        stop_timeout: float = 15.0,
        report: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"child names must be unique, got {names}")
        self._children = [_Child(spec) for spec in specs]
        self._policy = policy or RestartPolicy()
        self._stop_timeout = stop_timeout
        self._report = report or _print_report
        self._clock = clock
        self._stop_requested = threading.Event()
        self._force = False
        self._stopped = False

    # -- queries ---------------------------------------------------------------------------

    def pids(self) -> dict[str, int]:
        """The PID of every child that is running now (or exited but not yet reaped)."""
        return {c.spec.name: c.proc.pid for c in self._children if c.proc is not None}

    def all_pids_ever(self) -> list[int]:
        return [c.proc.pid for c in self._children if c.proc is not None]

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested.is_set()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        for child in self._children:
            self._spawn(child)

    def request_stop(self, *, force: bool = False) -> None:
        """Ask ``run()`` to stop every child; async-signal-safe enough for a Python handler."""
        if force:
            self._force = True
        self._stop_requested.set()

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM: stop cleanly. A second SIGINT/SIGTERM: kill the children now."""

        def handler(signum: int, frame: FrameType | None) -> None:
            if self._stop_requested.is_set():
                self.request_stop(force=True)
                return
            self._report(f"received {signal.Signals(signum).name}: stopping every child")
            self.request_stop()

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def run(self, *, interval: float = 0.2) -> int:
        """Supervise until a stop is requested, then stop. 0 on a requested stop; 1 when every
        child was given up on."""
        try:
            while not self._stop_requested.wait(interval):
                self.poll()
                if self._children and all(c.gave_up for c in self._children):
                    self._report("every child was given up on; stopping")
                    return 1
            return 0
        finally:
            self.stop()

    def poll(self) -> None:
        """One supervision step: notice exits, restart what is due."""
        now = self._clock()
        for child in self._children:
            if child.gave_up or self._stop_requested.is_set():
                continue
            if child.proc is not None and child.restart_at is None:
                code = child.proc.poll()
                if code is None:
                    if now - child.started_at >= self._policy.stable_after:
                        child.consecutive_failures = 0
                    continue
                self._on_exit(child, code, now)
            if child.restart_at is not None and now >= child.restart_at:
                child.restart_at = None
                self._spawn(child)

    def stop(self) -> None:
        """SIGTERM every child, wait up to ``stop_timeout`` in total, SIGKILL the rest."""
        if self._stopped:
            return
        self._stopped = True
        self._stop_requested.set()
        running = [c for c in self._children if c.proc is not None and c.proc.poll() is None]
        sig = signal.SIGKILL if self._force else signal.SIGTERM
        for child in running:
            _send(child.proc, sig)
        deadline = self._clock() + self._stop_timeout
        for child in running:
            assert child.proc is not None
            while child.proc.poll() is None and self._clock() < deadline:
                if self._force:
                    _send(child.proc, signal.SIGKILL)
                time.sleep(0.05)
        for child in running:
            assert child.proc is not None
            if child.proc.poll() is None:
                self._report(
                    f"{child.spec.name} (pid {child.proc.pid}) did not stop within "
                    f"{self._stop_timeout:.0f}s: killing it"
                )
                _send(child.proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=5)
        for child in self._children:
            if child.proc is not None and child.proc.returncode is not None:
                _append_marker(child.spec.log_path, f"stopped (exit {child.proc.returncode})")

    # -- internals -------------------------------------------------------------------------

    def _on_exit(self, child: _Child, code: int, now: float) -> None:
        what = _describe_exit(code)
        ran = now - child.started_at
        log = child.spec.log_path
        _append_marker(log, f"exited unexpectedly: {what} after {ran:.1f}s")
        if not self._policy.restart or code in self._policy.fatal_exit_codes:
            child.gave_up = True
            self._report(f"{child.spec.name} {what} after {ran:.1f}s, not restarting; see {log}")
            return
        window = self._policy.window_seconds
        while child.restart_times and now - child.restart_times[0] > window:
            child.restart_times.popleft()
        if len(child.restart_times) >= self._policy.max_restarts:
            child.gave_up = True
            self._report(
                f"{child.spec.name} {what}; it was restarted {len(child.restart_times)} times "
                f"in {window:.0f}s, giving up on it (see {log})"
            )
            return
        child.consecutive_failures += 1
        delay = self._policy.backoff(child.consecutive_failures)
        child.restart_times.append(now)
        child.restart_at = now + delay
        self._report(
            f"{child.spec.name} {what} after {ran:.1f}s; restarting in {delay:.0f}s (see {log})"
        )

    def _spawn(self, child: _Child) -> None:
        spec = child.spec
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        _append_marker(spec.log_path, f"starting: {' '.join(spec.argv)}")
        child.proc = spawn_child(spec)
        child.started_at = self._clock()


def spawn_child(spec: ChildSpec) -> subprocess.Popen[bytes]:
    """Start ``spec`` in its own session, stdin from /dev/null, stdout and stderr appended to
    its log file (its folder made if missing); on Linux it gets SIGTERM when the calling
    thread dies. Raises what ``Popen`` raises (OSError when the program cannot start)."""
    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(spec.log_path, "ab", buffering=0) as log:
        return subprocess.Popen(
            list(spec.argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if spec.env is None else dict(spec.env),
            cwd=spec.cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the supervisor's thread dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _send(proc: subprocess.Popen[bytes] | None, sig: int) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


def _append_marker(path: Path, text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as log:
        log.write(f"--- raftsched supervisor {stamp}: {text}\n")


def _print_report(message: str) -> None:
    print(f"raftsched standalone: {message}", file=sys.stderr, flush=True)
