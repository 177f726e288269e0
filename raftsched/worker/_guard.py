"""The guard of one attempt: the process that leads the attempt's session and kills all of it.

Two ways in (Linux only): the worker's supervisor (``supervisor.py``) forks a guard per attempt
and calls :func:`guard` in it (no exec: the cheap path); ``python -I -S _guard.py PARENT_PID --
CMD...`` does the same for a command, for a caller without a supervisor. Either way the attempt
dies with its PARENT (the supervisor, or the worker) however that dies, SIGKILL included
(invariant 2: an orphan that outlives its lease would run beside the retry the cluster grants
elsewhere).

- The guard leads the attempt's session and process group and runs the task as its child in
  that group, signal mask and ignored signals reset. The guard itself reads no stdin.
- ``PR_SET_PDEATHSIG``: the kernel sends :data:`DEATH_SIGNAL` when the THREAD that forked the
  guard exits (the supervisor is single-threaded; the script's caller must keep its forking
  thread alive until the guard is reaped). The signal is acted on only when it comes from
  PARENT (``si_pid``), or when ``getppid()`` is no longer PARENT, checked every :data:`POLL`
  seconds as a fallback (PARENT may die before ``prctl``; PDEATHSIG is also lost across a
  setuid exec). PARENT itself sends :data:`DEATH_SIGNAL` to kill the attempt (``kill``).
- ``PR_SET_CHILD_SUBREAPER``: a descendant orphaned out of the tree (a daemon that double-forks
  and calls ``setsid``) is re-parented to the guard, not to init, so the guard still sees it.
- Tear-down (when PARENT dies or asks, and when the task ends leaving anything behind): SIGKILL
  every live process of the session and every child of the guard, reap, repeat until none is
  left (at most :data:`TEARDOWN_SECONDS`). When the task ends and the guard has no child left
  at all, nothing is left (a live descendant always has an ancestor that is the subreaper's
  child), and the /proc scan is skipped. The guard then exits with the task's status: its exit
  code, or the same signal re-raised on itself (core dumps off).
- SIGTERM, SIGINT and SIGHUP to the group reach the task and are swallowed by the guard, which
  lives until the task ends: ``execution_timeout``'s SIGTERM keeps its grace.

Not covered: processes the tree hands to someone else (``systemd-run``, ``at``, a container
daemon, ssh to another host), descendants that become subreapers themselves and are then
orphaned away, processes it may not signal (setuid), and a SIGKILL of the guard itself (the
supervisor, a subreaper too, then kills what the guard's death re-parents to it). Only stdlib
imports: the script runs with ``-I -S`` for a fast start.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the script runs with -I -S: import nothing it does not need
    from collections.abc import Callable, Mapping
    from typing import Any, NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
DEATH_SIGNAL = signal.SIGUSR1  # not one the worker sends: SIGTERM/SIGKILL go to the group
POLL = 0.25
TEARDOWN_SECONDS = 10.0
CANNOT_START = 127  # as a shell says "command not found"
WATCHED = {signal.SIGCHLD, DEATH_SIGNAL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
RESET = {getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)}


_libc: ctypes.CDLL | None = None


def _prctl(option: int, value: int) -> None:
    global _libc
    libc = _libc = _libc or ctypes.CDLL(None, use_errno=True)
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


def _exit_like(wait_status: int) -> NoReturn:
    if os.WIFSIGNALED(wait_status):
        signum = os.WTERMSIG(wait_status)
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
            os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # a signal whose default is not to terminate: the shell's code
    os._exit(os.waitstatus_to_exitcode(wait_status))


def _no_children_left() -> bool:
    """Whether I have no child at all, live or zombie. I am a subreaper: a live descendant
    always has a live ancestor that is my child, so then nothing of the attempt is left (and
    no /proc scan is needed, the common case)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


def guard(parent: int, start: Callable[[], int]) -> NoReturn:
    """Be the guard of one attempt and exit like it: ``start()`` starts the task as my child
    and returns its PID. Call it in the process that leads the attempt's session, with
    ``parent`` the process whose death must kill the attempt (this process's parent). Every
    signal of :data:`WATCHED` must be blocked before ``start()`` runs (``start`` unblocks
    them in the task)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, DEATH_SIGNAL)
    if os.getppid() != parent:  # it died before prctl
        os._exit(CANNOT_START)
    try:
        task = start()
    except OSError as err:
        print(f"cannot start the task: {err}", file=sys.stderr, flush=True)
        os._exit(CANNOT_START)
    status: list[int] = []
    while not status:
        info = signal.sigtimedwait(WATCHED, POLL)
        orphaned = os.getppid() != parent
        if orphaned or (
            info is not None and info.si_signo == DEATH_SIGNAL and info.si_pid == parent
        ):
            _teardown(task, status)
            os._exit(128 + signal.SIGKILL)  # nobody is waiting for this status
        _reap(task, status)
    if not _no_children_left():
        _teardown(task, status)
    _exit_like(status[0])


def drop_privileges(user: Mapping[str, Any] | None) -> None:
    """Become ``user`` (``task_user.TaskUser.wire()``: uid, gid, groups) for good: groups,
    then gid, then uid (in the other order the gid could no longer be changed), real, effective
    and saved alike, then check that none of it can be undone. Non-dumpable after it, so another
    process of that user cannot read this one's memory (an exec makes a program dumpable
    again). Nothing to do without a user, or when this process already is that user. Raises
    OSError when it cannot be done: the caller must not run the task then."""
    if not user:
        return
    uid, gid = int(user["uid"]), int(user["gid"])
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        os.setgroups([int(g) for g in user.get("groups") or (gid,)])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError(f"still uid {os.getresuid()}, gid {os.getresgid()} after the switch")
    if uid != 0:
        try:
            os.setuid(0)
        except OSError:
            pass
        else:
            raise OSError("could become root again after the switch")
    _prctl(PR_SET_DUMPABLE, 0)


def spawn_command(
    command: list[str], env: Mapping[str, str], user: Mapping[str, Any] | None = None
) -> int:
    """Start ``command`` as my child with the signal mask and the watched signals reset; as
    ``user`` (see :func:`drop_privileges`) when given."""
    if not user:
        return os.posix_spawnp(command[0], command, env, setsigmask=(), setsigdef=RESET | WATCHED)
    pid = os.fork()  # posix_spawn cannot switch users: a fork of this single-threaded guard
    if pid == 0:
        try:
            drop_privileges(user)
            for signum in RESET | WATCHED:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            os.execvpe(command[0], command, env)
        except BaseException as err:
            with contextlib.suppress(BaseException):
                name = user.get("name") or user.get("uid")
                os.write(2, f"raftsched: cannot run the task as user {name}: {err}\n".encode())
        os._exit(CANNOT_START)
    return pid


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: _guard.py WORKER_PID -- COMMAND [ARG...]", file=sys.stderr)
        os._exit(2)
    worker, command = int(argv[0]), argv[2:]

    def start() -> int:
        task = spawn_command(command, os.environ)
        devnull = os.open(os.devnull, os.O_RDONLY)  # the guard itself reads no stdin
        os.dup2(devnull, 0)
        os.close(devnull)
        return task

    guard(worker, start)


if __name__ == "__main__":
    main(sys.argv[1:])
