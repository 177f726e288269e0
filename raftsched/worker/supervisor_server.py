"""The loop of the task supervisor and of each fork server (:class:`Server`): reap, fence, kill
and report the attempts' guards, serve the worker's requests, and report the held leases once
the worker died. What it does and why: ``supervisor.py``. Lean on purpose (stdlib and _guard).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from typing import Any, NoReturn

from raftsched.worker import _guard
from raftsched.worker.forkserver import _fork_python, _forkserver_main
from raftsched.worker.supervisor_wire import _close_all_but, _read_spec, recv, send

PARENT_POLL = 1.0


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
        # The worker's calls in flight that may grant leases (``poll``), by slot: its latest
        # Lease ("lease") and its latest CompleteBatch that asks for more ("outcomes")
        self.polls: dict[str, dict[str, Any]] = {}
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
        worker armed a death report and held leases (or had a call in flight that leases),
        wait (bounded) until no process of any attempt is left, then have
        :mod:`raftsched.worker._last_words` report those attempts as failed, so the cluster
        retries them now instead of after their lease TTL, and sign the worker off (the
        workers page lists it as lost, with why). A worker that stopped on its own holds
        nothing and signed itself off: nothing to say for it."""
        for pid in self.guards:
            with contextlib.suppress(OSError):
                os.kill(pid, _guard.DEATH_SIGNAL)
        for pid in self.forkservers:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        armed = self.report_fd is not None and (self.held or self.polls) and not self.is_forkserver
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
            polls = list(self.polls.values())
            data = json.dumps({"held": list(self.held.values()), "polls": polls}).encode()
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
            self._spawn(int(message["id"]), message, fds)
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
            rid, slot = str(message.get("request_id") or ""), str(message.get("slot") or "lease")
            if rid:
                self.polls[slot] = {
                    "request_id": rid,
                    "max_tasks": int(message.get("max_tasks") or 0),
                }
            else:
                self.polls.pop(slot, None)
        elif op == "drop":
            self.held.pop(str(message.get("ref")), None)
        elif op == "arm" and fds and not self.is_forkserver:
            if self.report_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self.report_fd)
            self.report_fd = os.dup(fds[0])  # the caller closes the fds it was sent

    def _spawn(self, ident: int, message: dict[str, Any], fds: list[int]) -> None:
        if len(fds) != 4:
            self._reply({"op": "exit", "id": ident, "error": "bad spawn request"})
            return
        try:
            at = message.get("deadline")
            deadline = None if at is None else float(at)
            pid = os.fork()
        except (OSError, TypeError, ValueError) as err:
            self._reply({"op": "exit", "id": ident, "error": f"cannot start the task: {err}"})
            return
        if pid == 0:
            self._become_guard(fds)
        self.guards[pid] = ident
        self.by_id[ident] = pid
        if deadline is not None:
            self.deadlines[pid] = deadline
        self._reply({"op": "started", "id": ident, "pid": pid})

    def _become_guard(self, fds: list[int]) -> NoReturn:
        try:
            # The spec (the task's environment: its declared secrets) is read here, in the
            # guard, never in the server: what the server reads stays in the memory every
            # later fork copies (fork servers, other attempts' guards and warm tasks).
            spec = _read_spec(fds[3])
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
                    return _guard.spawn_command(argv, env, spec.get("user"))

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
