"""The worker's side of the task supervisor (``supervisor.py``): start it, ask it for attempts.

:func:`executor` is this process's one :class:`Executor`. It starts the supervisor on first use
(and again if it died: the attempts it ran then end as failures), keeps one fork server per
DAG file that PythonTasks of this worker come from (at most :data:`MAX_FORKSERVERS`, least
recently used retired first), and hands :meth:`Executor.spawn` calls to the right server. A
:class:`Handle` is one attempt: its guard's PID, its end (wait status, or why it could not
run), and the requests the runner makes of it: ``signal`` (SIGTERM to its group), ``kill``
(the guard kills the whole attempt) and ``extend`` (move on the lease deadline at which its
server kills it unasked).

A PythonTask whose DAG file has no usable fork server (the import failed, took longer than
:data:`FORKSERVER_WAIT`, or the file is missing) runs cold: ``python -m
raftsched.worker._run_python`` under a guard forked by the supervisor, as before, so its
attempt shows the import's error itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import raftsched
from raftsched import taskenv
from raftsched.worker.channel import Channel, Handle  # Handle: re-exported for the runner
from raftsched.worker.supervisor_wire import file_stamp

log = logging.getLogger(__name__)

MAX_FORKSERVERS = 8
FORKSERVER_WAIT = 60.0  # seconds an attempt waits for its DAG file's fork server to import it
STARTED_WAIT = 10.0  # seconds a warm spawn waits to be acknowledged before it may go cold


@dataclass(eq=False)
class _ForkServer:
    stamp: list[int]
    channel: Channel
    used: float = field(default_factory=time.monotonic)


def package_root() -> str:
    return str(Path(raftsched.__file__).resolve().parent.parent)


class Executor:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.supervisor: Channel | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.forkservers: dict[str, _ForkServer] = {}
        self.cold: dict[str, list[int]] = {}  # DAG files whose import failed, by stamp
        self.last_words: bytes | None = None  # see arm()
        self.starts = 0  # supervisors started: more than one, it died and was restarted

    # -- the supervisor --------------------------------------------------------------------
    def _supervisor(self) -> Channel:
        with self.lock:
            if self.supervisor is None or self.supervisor.closed:
                self._start_supervisor()
            assert self.supervisor is not None
            return self.supervisor

    def _start_supervisor(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        self.forkservers.clear()  # they die with it
        taskenv.protect_this_process()  # a task cannot read our environ in /proc either
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = taskenv.scrubbed()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root(), env.get("PYTHONPATH")]))
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "raftsched.worker.supervisor",
                    str(theirs.fileno()),
                    str(os.getpid()),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=env,
                cwd="/",
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.supervisor = Channel(ours, "supervisor")
        self.starts += 1
        log.info("task supervisor started (pid %d)", self.proc.pid)
        if self.last_words is not None:
            self._arm(self.supervisor)

    # -- the death report (docs/architecture.md §11) ---------------------------------------
    def arm(self, config: Mapping[str, Any]) -> None:
        """Should this process die, its supervisor, once every attempt's last process is
        gone, reports the leases held (``hold``) as failed attempts through the cluster
        ``config`` describes (servers, token, tls_ca, worker_id, lease_ttl). The config
        travels in a memfd the supervisor keeps unread (its forks, the tasks, never hold the
        token in memory)."""
        with self.lock:
            self.last_words = json.dumps(dict(config)).encode()
            if self.supervisor is not None and not self.supervisor.closed:
                self._arm(self.supervisor)

    def _arm(self, channel: Channel) -> None:
        assert self.last_words is not None
        fd = os.memfd_create("raftsched-last-words", os.MFD_CLOEXEC)
        try:
            view = memoryview(self.last_words)
            while view:
                view = view[os.write(fd, view) :]
            channel.request({"op": "arm"}, (fd,))
        finally:
            os.close(fd)

    def hold(self, ref: str, lease: Mapping[str, Any]) -> None:
        """The worker holds ``lease`` (dag_id, run_id, task_id, token) until :meth:`drop`."""
        self._supervisor().request({"op": "hold", "ref": ref, "lease": dict(lease)})

    def polling(self, request_id: str, max_tasks: int, slot: str = "lease") -> None:
        """A call that leases is about to be sent: should this process die before it holds
        what that call granted, the death report replays it (a Lease with the same request
        id) to hand the grants back. Only the latest call of each ``slot`` counts ("lease":
        the Lease long poll; "outcomes": a CompleteBatch asking for more); an empty
        ``request_id``: none in flight any more."""
        self._supervisor().request(
            {"op": "poll", "request_id": request_id, "max_tasks": int(max_tasks), "slot": slot}
        )

    def drop(self, ref: str) -> None:
        """The lease ``ref`` is over for this worker (reported, handed back or lost)."""
        with self.lock:
            channel = self.supervisor
        if channel is not None and not channel.closed:
            channel.request({"op": "drop", "ref": ref})

    # -- fork servers ----------------------------------------------------------------------
    def _forkserver(self, path: str) -> Channel | None:
        """The ready fork server of the DAG file at ``path`` as it is now, or None: cold."""
        stamp = file_stamp(path)
        if stamp is None:
            return None
        supervisor = self._supervisor()
        with self.lock:
            if self.cold.get(path) == stamp:
                return None
            fs = self.forkservers.get(path)
            if fs is not None and (fs.stamp != stamp or fs.channel.closed):
                self._retire(path)
                fs = None
            if fs is None:
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    ok = supervisor.request({"op": "forkserver", "path": path}, (theirs.fileno(),))
                finally:
                    theirs.close()
                if not ok:
                    ours.close()
                    return None
                fs = self.forkservers[path] = _ForkServer(stamp, Channel(ours, "fork server"))
                while len(self.forkservers) > MAX_FORKSERVERS:
                    oldest = min(self.forkservers, key=lambda p: self.forkservers[p].used)
                    self._retire(oldest)
            fs.used = time.monotonic()
        if not fs.channel.ready.wait(FORKSERVER_WAIT) or fs.channel.failed is not None:
            with self.lock:
                if fs.channel.failed is not None and not fs.channel.closed:
                    self.cold[path] = stamp
                if self.forkservers.get(path) is fs:
                    self._retire(path)
            return None
        changed = fs.channel.stamp != stamp  # changed while it imported: not the code to run
        if changed or any(file_stamp(file) != dep for file, dep in fs.channel.deps):
            # or a module beside it (a helper it imports) changed since: a new fork server
            with self.lock:
                if self.forkservers.get(path) is fs:
                    self._retire(path)
            return None
        return fs.channel

    def _retire(self, path: str) -> None:
        fs = self.forkservers.pop(path, None)
        if fs is not None:
            fs.channel.request({"op": "retire"})

    # -- attempts --------------------------------------------------------------------------
    def spawn(
        self,
        *,
        kind: str,
        env: Mapping[str, str],
        cwd: str,
        stdout: int,
        stderr: int,
        command: str = "",
        fileloc: str = "",
        callable_name: str = "",
        kwargs: Mapping[str, Any] | None = None,
        deadline: float | None = None,
        user: Mapping[str, Any] | None = None,
    ) -> Handle:
        """``deadline``: the attempt's fence (see :meth:`Handle.extend`); None: none.
        ``user``: whom the task runs as (``task_user.TaskUser.wire()``); None: as we do."""
        base: dict[str, Any] = {"env": dict(env), "cwd": cwd, "deadline": deadline}
        if user is not None:
            base["user"] = dict(user)
        kwargs = dict(kwargs or {})
        stdin_data: bytes | None = None
        channel: Channel | None = None
        if kind == "bash":
            spec = {**base, "kind": "exec", "argv": ["bash", "-c", command]}
        elif kind == "python":
            channel = self._forkserver(fileloc)
            if channel is not None:
                spec = {
                    **base,
                    "kind": "python",
                    "fileloc": fileloc,
                    "callable": callable_name,
                    "kwargs": kwargs,
                }
            else:
                argv = [sys.executable, "-m", "raftsched.worker._run_python"]
                spec = {**base, "kind": "exec", "argv": [*argv, fileloc, callable_name]}
                stdin_data = json.dumps(kwargs).encode()
        else:
            raise ValueError(f"unknown task kind {kind!r}: expected 'bash' or 'python'")
        if channel is not None:
            handle = channel.spawn(spec, (devnull := _stdin(None), stdout, stderr))
            os.close(devnull)
            handle.started.wait(STARTED_WAIT)
            if handle.pid is not None or not channel.closed:
                return handle
            # The fork server retired or died before it got the request: run it cold.
            argv = [sys.executable, "-m", "raftsched.worker._run_python", fileloc, callable_name]
            spec = {**base, "kind": "exec", "argv": argv}
            stdin_data = json.dumps(kwargs).encode()
        stdin = _stdin(stdin_data)
        try:
            return self._supervisor().spawn(spec, (stdin, stdout, stderr))
        finally:
            os.close(stdin)


def _stdin(data: bytes | None) -> int:
    if data is None:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    fd = os.memfd_create("raftsched-stdin", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


_executor: Executor | None = None
_executor_lock = threading.Lock()


def current() -> Executor | None:
    """This process's executor if it made one (the metrics read it without starting it)."""
    with _executor_lock:
        return _executor if _executor is not None and _executor.pid == os.getpid() else None


def executor() -> Executor:
    """This process's executor (a forked child gets a new one)."""
    global _executor
    with _executor_lock:
        if _executor is None or _executor.pid != os.getpid():
            _executor = Executor()
        return _executor
