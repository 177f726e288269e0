"""The worker's task supervisor and its Python fork servers (``-m raftsched.worker.supervisor``).

One long-lived process per worker (started by ``executor.py``) forks every attempt, so an
attempt costs a fork and, for a BashTask, the exec of bash: no interpreter starts per attempt.

- Every attempt gets a guard forked from a server (``_guard.guard``: the attempt's session
  leader and subreaper, tied to the server by ``PR_SET_PDEATHSIG``) that starts the task, kills
  whatever the task leaves behind and exits like the task. The server reports the guard's wait
  status to the worker. Its own stdin/stdout/stderr come from the worker (SCM_RIGHTS): the
  worker reads the pipes itself, as before.
- BashTask, or a PythonTask run cold: the guard ``posix_spawn``s the command (argv, env, cwd
  from the request). A cold PythonTask (``_run_python``) reads its kwargs on stdin.
- A fork server (``op: forkserver``): a fork of the supervisor, which already has raftsched
  imported, that imports one DAG file once and then forks the guards of that file's
  PythonTasks; each guard forks the task, which sets its own environment, working directory and
  stdio and calls the function (``forkserver._run_warm``). The worker keys fork servers by the
  file's path and stat (mtime, size, inode) and retires one whose file changed, so a DAG file edited
  between attempts runs its new code. A file that fails to import gets no fork server: its
  attempts run cold and show the error as before.
- Lifetime: the worker holds the other end of each server's socket. The worker's death (kill -9
  included) closes it; the server then sends each guard :data:`_guard.DEATH_SIGNAL` and exits;
  each guard also gets it as its parent-death signal, kills its whole attempt and exits. A
  server also exits when its parent changes (``getppid``, checked every second), and a fork
  server gets SIGKILL as its parent-death signal from the supervisor. The supervisor leads a
  session of its own and ignores SIGINT/SIGTERM/SIGHUP: a terminal's ^C or a SIGTERM to the
  worker's group leaves the attempts to the worker's grace period.
- Death report: once the worker died, the supervisor waits until no process of any attempt
  is left (it is the subreaper of them all), then starts ``raftsched.worker._last_words``,
  which reports each lease the worker held as a failed attempt (fenced by its token), so the
  cluster retries them at once instead of after their TTL (docs/architecture.md §11).
- What a task can see of it: nothing. It is non-dumpable (``taskenv.protect_this_process``,
  first thing after its exec; every fork of it inherits that), so its /proc files (the death
  report's memfd among its fds, its memory) are root's. It never reads a spawn's spec: the
  guard reads it after the fork, so no attempt's environment (declared secrets) is left in
  the memory that later forks (fork servers, other attempts' guards and warm tasks) copy. A
  guard hands the task fds 0-2 only. With ``[worker] run_as_user`` the task itself runs as
  another user (``task_user.py``).
- ``signal`` (SIGTERM on ``execution_timeout``) goes to the guard's process group, which the
  guard swallows; ``kill`` sends the guard :data:`_guard.DEATH_SIGNAL` (it kills the whole
  attempt, escaped daemons included, then exits 137), and SIGKILLs its group if it is still
  there after ``_guard.TEARDOWN_SECONDS``. The server is a subreaper too: what a guard killed
  by a signal leaves behind is re-parented to it and SIGKILLed. Signals go only to guards not
  yet reaped, from the one thread that reaps, so never to a reused PID.
- Lease fence: a ``spawn`` may carry a ``deadline`` (``time.monotonic()``, the same clock in
  every process of the machine), which ``extend`` moves on. When it passes the server kills
  the attempt as ``kill`` does and marks its ``exit`` ``fenced``. The worker moves it on each
  heartbeat the cluster accepts, so an attempt dies before its lease can expire even when the
  worker is frozen (SIGSTOP, swapped out) or cut off, and cannot run beside its retry.

The wire protocol: ``supervisor_wire.py``; the server's loop: ``supervisor_server.py``; a
fork server and its warm tasks: ``forkserver.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import NoReturn

# re-exported: the names this module held before it was split
from raftsched import taskenv
from raftsched.worker.supervisor_server import Server
from raftsched.worker.supervisor_wire import recv, send

__all__ = ["Server", "main", "recv", "send"]


def main(argv: list[str]) -> NoReturn:
    if len(argv) != 2:
        print("usage: python -m raftsched.worker.supervisor FD WORKER_PID", file=sys.stderr)
        os._exit(2)
    fd, worker = int(argv[0]), int(argv[1])
    # First: execve made this process dumpable again. Non-dumpable, its /proc files (fds,
    # among them the death report's memfd with the worker's token, environ, mem) are root's
    # and no process of the same user may ptrace it; every fork of it (fork servers, guards,
    # warm tasks) inherits that.
    taskenv.protect_this_process()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    if os.getppid() != worker:
        os._exit(0)
    # Lean on purpose (stdlib and _guard): every attempt is a fork of this process. A fork
    # server imports raftsched's authoring API and its DAG file after its own fork.
    Server(socket.socket(fileno=fd), worker, forkserver=False).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
