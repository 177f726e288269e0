"""The guard between a worker and one attempt: ``python -I -S _guard.py WORKER_PID -- CMD...``.

The worker starts every attempt under this guard (Linux only, see ``runner.py``) so that the
attempt dies with the worker however the worker dies, SIGKILL included (invariant 2: an orphan
that outlives its lease would run beside the retry the cluster grants elsewhere).

- The guard leads the attempt's session and process group (the worker starts it with
  ``start_new_session``) and runs CMD as its child in that group, signal mask and ignored
  signals reset. The guard itself reads no stdin (so a PythonTask's kwargs reach CMD alone).
- ``PR_SET_PDEATHSIG``: the kernel sends :data:`DEATH_SIGNAL` when the worker THREAD that
  forked the guard exits. That thread is the one in ``Attempt.run()``, which returns only
  after the guard is reaped; so the signal means the worker died, or gave up supervising.
  The signal is acted on only when it comes from WORKER_PID (``si_pid``), or when
  ``getppid()`` is no longer WORKER_PID, checked every :data:`POLL` seconds as a fallback
  (the worker may die before ``prctl``; PDEATHSIG is also lost across a setuid exec).
- ``PR_SET_CHILD_SUBREAPER``: a descendant orphaned out of the tree (a daemon that double-forks
  and calls ``setsid``) is re-parented to the guard, not to init, so the guard still sees it.
- Tear-down (when the worker dies, and when CMD ends): SIGKILL every live process of the
  session and every child of the guard, reap, repeat until none is left (at most
  :data:`TEARDOWN_SECONDS`). The guard then exits with CMD's status: its exit code, or the
  same signal re-raised on itself (core dumps off), so the worker sees what it saw before.
- SIGTERM, SIGINT and SIGHUP to the group reach CMD and are swallowed by the guard, which
  lives until CMD ends: ``execution_timeout``'s SIGTERM keeps its grace.

Not covered: processes the tree hands to someone else (``systemd-run``, ``at``, a container
daemon, ssh to another host), descendants that become subreapers themselves and are then
orphaned away, processes it may not signal (setuid), and a SIGKILL of the guard itself (the
worker's ``killpg`` covers the group then, not escapees from it). Only stdlib imports: it runs
with ``-I -S`` for a fast start.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
DEATH_SIGNAL = signal.SIGUSR1  # not one the worker sends: SIGTERM/SIGKILL go to the group
POLL = 0.25
TEARDOWN_SECONDS = 10.0
CANNOT_START = 127  # as a shell says "command not found"
WATCHED = {signal.SIGCHLD, DEATH_SIGNAL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
RESET = {getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)}


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        print(f"raftsched guard: prctl({option}): {os.strerror(err)}", file=sys.stderr)


def _session_and_children(me: int) -> list[int]:
    """Live processes of my session, and my children: everything the attempt started."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        state, ppid, session = fields[0], int(fields[1]), int(fields[3])
        if state not in ("Z", "X") and (session == me or ppid == me):
            found.append(int(name))
    return found


def _reap(task: int, status: list[int]) -> None:
    """Reap every exited child without blocking; CMD's wait status goes to ``status``."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == task:
            status.append(wait_status)


def _teardown(task: int, status: list[int]) -> None:
    me = os.getpid()
    deadline = time.monotonic() + TEARDOWN_SECONDS
    while True:
        victims = _session_and_children(me)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _reap(task, status)
        if not victims or time.monotonic() >= deadline:
            return
        signal.sigtimedwait({signal.SIGCHLD}, 0.02)  # orphans re-parent to me as parents die


def _exit_like(wait_status: int) -> None:
    if os.WIFSIGNALED(wait_status):
        signum = os.WTERMSIG(wait_status)
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
            os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # a signal whose default is not to terminate: the shell's code
    os._exit(os.waitstatus_to_exitcode(wait_status))


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: _guard.py WORKER_PID -- COMMAND [ARG...]", file=sys.stderr)
        os._exit(2)
    worker, command = int(argv[0]), argv[2:]
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, DEATH_SIGNAL)
    if os.getppid() != worker:  # it died before prctl
        os._exit(CANNOT_START)
    try:
        task = os.posix_spawnp(
            command[0], command, os.environ, setsigmask=(), setsigdef=RESET | WATCHED
        )
    except OSError as err:
        print(f"cannot start the task: {err}", file=sys.stderr)
        os._exit(CANNOT_START)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    status: list[int] = []
    while not status:
        info = signal.sigtimedwait(WATCHED, POLL)
        orphaned = os.getppid() != worker
        if orphaned or (
            info is not None and info.si_signo == DEATH_SIGNAL and info.si_pid == worker
        ):
            _teardown(task, status)
            os._exit(128 + signal.SIGKILL)  # nobody is waiting for this status
        _reap(task, status)
    _teardown(task, status)
    _exit_like(status[0])


if __name__ == "__main__":
    main(sys.argv[1:])
