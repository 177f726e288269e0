"""The worker's end of a server's socket (:class:`Channel`: the task supervisor or a fork
server) and the attempts started through it (:class:`Handle`), for ``executor.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

from raftsched.worker.supervisor_wire import recv, send

_ids = itertools.count(1)


class Handle:
    """One attempt started through a server. ``status`` is the guard's wait status once it
    exited; ``error`` says why there is none (it could not start, the server died)."""

    def __init__(self, channel: Channel) -> None:
        self.id = next(_ids)
        self.channel = channel
        self.pid: int | None = None
        self.status: int | None = None
        self.error: str | None = None
        self.fenced = False  # killed by its server: its lease deadline passed (see extend)
        self.done = threading.Event()
        self.started = threading.Event()  # set on "started", and when done

    def exited(self) -> bool:
        return self.done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def signal(self, signum: int) -> None:
        """Signal the attempt's process group (unless it already ended)."""
        if not self.done.is_set():
            self.channel.request({"op": "signal", "id": self.id, "signum": int(signum)})

    def kill(self) -> None:
        """Kill the whole attempt now: its guard SIGKILLs every process of it."""
        if not self.done.is_set():
            self.channel.request({"op": "kill", "id": self.id})

    def extend(self, deadline: float) -> None:
        """Move the attempt's fence to ``deadline`` (``time.monotonic()``, system-wide on
        Linux): its server kills the attempt when that passes without a later extension, even
        if this process is frozen (the worker's lease safety, see ``loop.py``)."""
        if not self.done.is_set():
            self.channel.request({"op": "extend", "id": self.id, "at": float(deadline)})

    def _update(self, message: Mapping[str, Any]) -> None:
        if message.get("op") == "started":
            self.pid = int(message["pid"])
            self.started.set()
            return
        if message.get("fenced"):
            self.fenced = True
        if "status" in message:
            self.status = int(message["status"])
        else:
            self.error = str(message.get("error") or "the task could not be started")
        self.done.set()
        self.started.set()

    def _lost(self, why: str) -> None:
        if not self.done.is_set():
            self.error = why
            self.done.set()
            self.started.set()


class Channel:
    """The worker's end of one server's socket, with a thread that reads the answers."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock = sock
        self.name = name
        self.handles: dict[int, Handle] = {}
        self.lock = threading.Lock()  # handles, closed: never held while sending
        self.send_lock = threading.Lock()  # one message at a time
        self.ready = threading.Event()  # a fork server: imported (or failed)
        self.failed: str | None = None
        self.stamp: list[int] | None = None
        self.deps: list[tuple[str, Any]] = []  # modules beside the DAG file, with their stamps
        self.closed = False
        threading.Thread(target=self._read, name=f"raftsched-{name}", daemon=True).start()

    def request(self, message: dict[str, Any], fds: tuple[int, ...] = ()) -> bool:
        try:
            with self.send_lock:
                send(self.sock, message, fds)
        except OSError:
            return False
        return True

    def spawn(self, spec: dict[str, Any], stdio: tuple[int, int, int]) -> Handle:
        handle = Handle(self)
        with self.lock:
            if self.closed:
                handle._lost(f"the task {self.name} is gone")
                return handle
            self.handles[handle.id] = handle
        memfd = os.memfd_create("raftsched-spec", os.MFD_CLOEXEC)
        try:
            data = json.dumps(spec).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(memfd, view) :]
            # the deadline rides in the message: the server never reads the spec (the guard does)
            message = {"op": "spawn", "id": handle.id, "deadline": spec.get("deadline")}
            if not self.request(message, (*stdio, memfd)):
                handle._lost(f"the task {self.name} is gone")
        finally:
            os.close(memfd)
        return handle

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def _read(self) -> None:
        while True:
            try:
                message, fds = recv(self.sock)
            except (OSError, ValueError):
                message, fds = None, []
            for fd in fds:
                os.close(fd)
            if message is None:
                break
            op = message.get("op")
            if op == "ready":
                self.stamp = message.get("stamp")
                self.deps = [(str(f), st) for f, st in message.get("deps") or ()]
                self.ready.set()
            elif op == "failed":
                self.failed = str(message.get("message") or "failed")
                self.ready.set()
            elif op in ("started", "exit"):
                with self.lock:
                    handle = self.handles.get(int(message.get("id", 0)))
                    if op == "exit":
                        self.handles.pop(int(message.get("id", 0)), None)
                if handle is not None:
                    handle._update(message)
        with self.lock:
            self.closed = True
            lost = list(self.handles.values())
            self.handles.clear()
        self.failed = self.failed or f"the task {self.name} exited"
        self.ready.set()
        for handle in lost:
            handle._lost(f"the worker's task {self.name} exited while the task ran")
        with contextlib.suppress(OSError):
            self.sock.close()
