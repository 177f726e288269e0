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
  stdio and calls the function (:func:`_run_warm`). The worker keys fork servers by the file's
  path and stat (mtime, size, inode) and retires one whose file changed, so a DAG file edited
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

Messages are JSON objects on a SOCK_SEQPACKET socket, one per packet, file descriptors
attached. Worker -> server: ``spawn`` (id; fds stdin, stdout, stderr, spec: a memfd holding the
JSON spec), ``signal`` (id, signum), ``kill`` (id), ``forkserver`` (path; fd: its socket),
``retire`` (exit once no attempt runs; a spawn that arrives first still runs), ``extend`` (id,
at: the attempt's new deadline), ``arm`` (fd: a memfd saying how to reach the cluster),
``hold`` (ref, lease: a lease the worker holds), ``drop`` (ref: no longer held) and ``poll``
(request_id, max_tasks: the Lease the worker is sending). Server ->
worker: ``started`` (id, pid), ``exit`` (id, status: the wait status, or error; ``fenced`` when
its deadline killed it), ``ready`` (stamp) / ``failed`` (message) from a fork server.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import select
import signal
import socket
import sys
import tempfile
import time
import traceback
from typing import Any, NoReturn

from raftsched.worker import _guard

MAX_PACKET = 1 << 16
MAX_FDS = 4
PARENT_POLL = 1.0
MAXFD = 1 << 20
FORKSERVER_IMPORT_SECONDS = 60  # SIGALRM (default action) ends a fork server stuck importing


def send(
    sock: socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()
) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def recv(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The next message and its fds; (None, []) at EOF."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_PACKET, MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


def _read_spec(fd: int) -> dict[str, Any]:
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return json.loads(b"".join(chunks))


def _close_all_but(*keep: int) -> None:
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, MAXFD)


class Server:
    """The loop of the supervisor and of each fork server (single-threaded)."""

    def __init__(self, sock: socket.socket, parent: int, *, forkserver: bool) -> None:
        self.sock = sock
        self.parent = parent
        self.is_forkserver = forkserver
        self.me = os.getpid()
        self.guards: dict[int, int] = {}  # guard pid -> attempt id
        self.by_id: dict[int, int] = {}  # attempt id -> guard pid
        self.killed: dict[int, float] = {}  # guard pid -> when it was told to kill
        self.deadlines: dict[int, float] = {}  # guard pid -> its lease fence (monotonic)
        self.fenced: set[int] = set()  # guards killed by their deadline
        self.forkservers: set[int] = set()
        self.retiring = False
        self.sweep = False
        self.module: Any = None  # a fork server's DAG module
        # The worker's death report (docs/architecture.md §11): the leases the worker holds
        # (``hold``/``drop``), and a memfd with how to reach the cluster (``arm``), never read
        # here so that no fork of this process (a task) has the worker's token in its memory.
        self.held: dict[str, dict[str, Any]] = {}
        self.report_fd: int | None = None
        self.poll: dict[str, Any] | None = None  # the worker's latest Lease (``poll``)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        _guard._prctl(_guard.PR_SET_CHILD_SUBREAPER, 1)

    # -- the loop --------------------------------------------------------------------------
    def serve(self) -> NoReturn:
        gc.freeze()  # what exists now is never scanned again: a fork's pages stay shared
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while True:
            if self.retiring and not self.guards:
                os._exit(0)
            timeout = 0.05 if (self.killed or self.sweep) else PARENT_POLL
            if self.deadlines:
                timeout = max(0.0, min(timeout, min(self.deadlines.values()) - time.monotonic()))
            try:
                ready = {fd for fd, _ in poller.poll(timeout * 1000)}
            except InterruptedError:
                ready = set()
            if self.wake_r in ready:
                with contextlib.suppress(OSError):
                    while os.read(self.wake_r, 4096):
                        pass
            self._reap()
            if self.sock.fileno() in ready:
                try:
                    message, fds = recv(self.sock)
                except (OSError, ValueError):
                    message, fds = None, []
                if message is None:
                    self._die()
                try:
                    self._handle(message, fds)
                finally:
                    for fd in fds:
                        with contextlib.suppress(OSError):
                            os.close(fd)
            if os.getppid() != self.parent:
                self._die()
            self._fence()
            self._backstop()
            if self.sweep:
                self._sweep()

    def _die(self) -> NoReturn:
        """The worker is gone: every attempt dies (each guard kills its own tree). When the
        worker armed a death report and held leases, wait (bounded) until no process of any
        attempt is left, then have :mod:`raftsched.worker._last_words` report those attempts
        as failed, so the cluster retries them now instead of after their lease TTL."""
        for pid in self.guards:
            with contextlib.suppress(OSError):
                os.kill(pid, _guard.DEATH_SIGNAL)
        for pid in self.forkservers:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        armed = self.report_fd is not None and (self.held or self.poll) and not self.is_forkserver
        if armed and self._all_gone():
            self._report_death()
        os._exit(0)

    def _all_gone(self) -> bool:
        """Reap until I have no child at all, live or zombie (SIGKILLing whatever is still
        there after the guards' teardown time). I am a subreaper: every process an attempt
        started, however detached, descends from a child of mine until it dies, so no child
        left means nothing of any attempt runs. False if that cannot be had in bounded time
        (a process stuck in the kernel): then nothing is reported and the leases expire."""
        start = time.monotonic()
        hard = start + _guard.TEARDOWN_SECONDS + 1.0
        give_up = hard + 5.0
        while True:
            try:
                while os.waitpid(-1, os.WNOHANG)[0] != 0:
                    pass
            except ChildProcessError:
                return True
            now = time.monotonic()
            if now >= give_up:
                return False
            if now >= hard:
                for pid in _guard._session_and_children(self.me):
                    if _parent_of(pid) == self.me:
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def _report_death(self) -> None:
        """Start the reporter, detached: it gets the armed memfd and the held leases."""
        assert self.report_fd is not None
        try:
            data = json.dumps({"held": list(self.held.values()), "poll": self.poll}).encode()
            leases = os.memfd_create("raftsched-held", 0)
            view = memoryview(data)
            while view:
                view = view[os.write(leases, view) :]
            os.lseek(leases, 0, os.SEEK_SET)
            os.set_inheritable(self.report_fd, True)
            argv = [sys.executable, "-m", "raftsched.worker._last_words"]
            argv += [str(self.report_fd), str(self.parent)]
            os.posix_spawn(
                sys.executable,
                argv,
                dict(os.environ),
                file_actions=[(os.POSIX_SPAWN_DUP2, leases, 0)],
                setsid=True,
                setsigdef=(signal.SIGINT, signal.SIGTERM, signal.SIGHUP),
            )
        except OSError:
            pass  # nothing reported: the leases expire after their TTL, as before

    def _reply(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            send(self.sock, message)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.guards:
                ident = self.guards.pop(pid)
                self.by_id.pop(ident, None)
                self.killed.pop(pid, None)
                self.deadlines.pop(pid, None)
                if os.WIFSIGNALED(status):
                    self.sweep = True  # it may have left orphans to me
                reply: dict[str, Any] = {"op": "exit", "id": ident, "status": status}
                if pid in self.fenced:
                    self.fenced.discard(pid)
                    reply["fenced"] = True
                self._reply(reply)
            else:
                self.forkservers.discard(pid)  # or an orphan I adopted and killed

    def _sweep(self) -> None:
        """SIGKILL my children that are neither guards nor fork servers: orphans of a guard
        that was killed by a signal (re-parented to me, a subreaper)."""
        known = set(self.guards) | self.forkservers
        strays = [p for p in _guard._session_and_children(self.me) if p not in known]
        strays = [p for p in strays if _parent_of(p) == self.me]
        for pid in strays:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.sweep = bool(strays)

    def _fence(self) -> None:
        """Kill each attempt whose lease deadline passed (see ``extend``)."""
        now = time.monotonic()
        for pid, at in list(self.deadlines.items()):
            if now >= at:
                del self.deadlines[pid]
                if pid in self.guards and pid not in self.killed:
                    self.fenced.add(pid)
                    self._kill(pid)

    def _kill(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            os.kill(pid, _guard.DEATH_SIGNAL)
        self.killed.setdefault(pid, time.monotonic())

    def _backstop(self) -> None:
        now = time.monotonic()
        for pid, since in list(self.killed.items()):
            if now - since > _guard.TEARDOWN_SECONDS + 2 and pid in self.guards:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                self.killed[pid] = now

    # -- requests --------------------------------------------------------------------------
    def _handle(self, message: dict[str, Any], fds: list[int]) -> None:
        op = message.get("op")
        if op == "spawn":
            self._spawn(int(message["id"]), fds)
        elif op == "signal":
            pid = self.by_id.get(int(message["id"]))
            if pid is not None:  # not reaped: the group id is still the attempt's
                with contextlib.suppress(OSError):
                    os.killpg(pid, int(message["signum"]))
        elif op == "kill":
            pid = self.by_id.get(int(message["id"]))
            if pid is not None:
                self._kill(pid)
        elif op == "extend":
            pid = self.by_id.get(int(message["id"]))
            if pid is not None and pid in self.deadlines:  # not fenced already
                self.deadlines[pid] = max(self.deadlines[pid], float(message["at"]))
        elif op == "forkserver" and not self.is_forkserver and fds:
            self._start_forkserver(str(message["path"]), fds[0])
        elif op == "retire":
            self.retiring = True
        elif op == "hold" and isinstance(message.get("lease"), dict):
            self.held[str(message.get("ref"))] = message["lease"]
        elif op == "poll":  # an empty request id: the poll was answered, nothing in flight
            rid = str(message.get("request_id") or "")
            self.poll = {"request_id": rid, "max_tasks": int(message.get("max_tasks") or 0)}
            self.poll = self.poll if rid else None
        elif op == "drop":
            self.held.pop(str(message.get("ref")), None)
        elif op == "arm" and fds and not self.is_forkserver:
            if self.report_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self.report_fd)
            self.report_fd = os.dup(fds[0])  # the caller closes the fds it was sent

    def _spawn(self, ident: int, fds: list[int]) -> None:
        if len(fds) != 4:
            self._reply({"op": "exit", "id": ident, "error": "bad spawn request"})
            return
        try:
            spec = _read_spec(fds[3])
            pid = os.fork()
        except (OSError, ValueError) as err:
            self._reply({"op": "exit", "id": ident, "error": f"cannot start the task: {err}"})
            return
        if pid == 0:
            self._become_guard(spec, fds)
        self.guards[pid] = ident
        self.by_id[ident] = pid
        if spec.get("deadline") is not None:
            self.deadlines[pid] = float(spec["deadline"])
        self._reply({"op": "started", "id": ident, "pid": pid})

    def _become_guard(self, spec: dict[str, Any], fds: list[int]) -> NoReturn:
        try:
            gc.disable()  # short-lived, leaves with os._exit: no page copied for the collector
            os.setsid()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for target, fd in enumerate(fds[:3]):
                os.dup2(fd, target)
            _close_all_but()
            os.chdir(spec["cwd"])
            env = {str(k): str(v) for k, v in spec["env"].items()}
            if spec["kind"] == "python":
                module = self.module

                def start() -> int:
                    return _fork_python(module, spec, env)
            else:
                argv = [str(a) for a in spec["argv"]]

                def start() -> int:
                    return _guard.spawn_command(argv, env)

            _guard.guard(self.me, start)
        except BaseException:
            with contextlib.suppress(BaseException):
                os.write(2, f"raftsched: cannot start the task:\n{traceback.format_exc()}".encode())
            os._exit(_guard.CANNOT_START)

    def _start_forkserver(self, path: str, fd: int) -> None:
        try:
            pid = os.fork()
        except OSError as err:
            with contextlib.suppress(OSError):
                send(socket.socket(fileno=os.dup(fd)), {"op": "failed", "message": str(err)})
            return
        if pid == 0:
            try:
                _forkserver_main(self.me, path, fd)
            finally:
                os._exit(1)
        self.forkservers.add(pid)


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _stamp(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def _forkserver_main(supervisor: int, path: str, fd: int) -> None:
    signal.set_wakeup_fd(-1)
    _close_all_but(fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):  # what the DAG file prints while imported goes nowhere
        os.dup2(devnull, target)
    os.close(devnull)
    _guard._prctl(_guard.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != supervisor:
        os._exit(0)
    os.chdir(tempfile.gettempdir())
    sock = socket.socket(fileno=fd)
    server = Server(sock, supervisor, forkserver=True)
    stamp = _stamp(path)
    try:
        from raftsched.worker._run_python import import_dag_file

        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(FORKSERVER_IMPORT_SECONDS)
        server.module = import_dag_file(path)
        signal.alarm(0)
    except BaseException as err:
        send(sock, {"op": "failed", "message": f"{type(err).__name__}: {err}"})
        os._exit(0)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    send(sock, {"op": "ready", "stamp": stamp, "deps": _dependencies(path)})
    server.serve()


def _dependencies(path: str, limit: int = 500) -> list[list[Any]]:
    """[file, stamp] of each module the DAG file imported from its own folder (its helpers):
    an edit to one of them must retire this fork server too, as an edit to the file does."""
    folder = os.path.dirname(os.path.abspath(path)) + os.sep
    deps = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        file = os.path.abspath(file)
        if file.startswith(folder) and file != os.path.abspath(path):
            deps.append([file, _stamp(file)])
            if len(deps) >= limit:
                break
    return deps


def _fork_python(module: Any, spec: dict[str, Any], env: dict[str, str]) -> int:
    """In a guard: fork the PythonTask from the warm fork server's memory."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = _run_warm(module, spec, env)
        except BaseException:
            with contextlib.suppress(BaseException):
                os.write(2, traceback.format_exc().encode())
        os._exit(code)
    return pid


def _run_warm(module: Any, spec: dict[str, Any], env: dict[str, str]) -> int:
    """The task process of a warm PythonTask: as ``_run_python`` would run it in a new
    interpreter, with the DAG module already imported."""
    for signum in _guard.WATCHED | _guard.RESET | {signal.SIGALRM}:
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as the interpreter sets it at start
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the process's stdin until it exits
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), "utf-8", "backslashreplace", write_through=True
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), "utf-8", "backslashreplace", write_through=True
    )
    sys.argv = [str(spec["fileloc"])]
    from raftsched.worker import _run_python

    code = _run_python.call(
        module, str(spec["fileloc"]), str(spec["callable"]), spec.get("kwargs") or {}
    )
    return _run_python.finish(code)


def main(argv: list[str]) -> NoReturn:
    if len(argv) != 2:
        print("usage: python -m raftsched.worker.supervisor FD WORKER_PID", file=sys.stderr)
        os._exit(2)
    fd, worker = int(argv[0]), int(argv[1])
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    if os.getppid() != worker:
        os._exit(0)
    # Lean on purpose (stdlib and _guard): every attempt is a fork of this process. A fork
    # server imports raftsched's authoring API and its DAG file after its own fork.
    Server(socket.socket(fileno=fd), worker, forkserver=False).serve()


if __name__ == "__main__":
    main(sys.argv[1:])
