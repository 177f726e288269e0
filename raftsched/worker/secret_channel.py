"""The worker's end of an attempt's on-demand secret reads (docs/architecture.md §22).

Task code may read a variable or connection it did not declare (Airflow's ``Variable.get``,
``BaseHook.get_connection``). It never holds the worker's token (README "Security model"), so
it asks its worker: one unix socket per attempt (:class:`SecretChannel`), in a directory of
its own that only the task's user may enter (mode 0700, given to ``[worker] run_as_user`` when
set), named by ``RAFTSCHED_SECRETS_SOCKET`` in the attempt's environment. A connection counts
only when the peer (``SO_PEERCRED``) runs as the task's user AND in the attempt's session
(whose leader is the attempt's guard, or the task itself without one): another attempt of the
same user cannot borrow this one's lease, even if it finds the path.

Each request is one JSON line ``{"kind": "variable"|"connection", "name": NAME}`` of at most
:data:`MAX_REQUEST_BYTES`; the answer one JSON line, ``{"value": ...}`` or ``{"error": ...,
"code": "not_found"|"restricted"|"refused"}``. The worker resolves it with the attempt's lease
(``ResolveSecrets`` with ``on_demand``: the node commits an audit record after checking the
lease is live and the DAG may read the name), adds the value to the attempt's maskers BEFORE
it answers (the task cannot print what it has not received), and keeps it for the attempt's
outcome masking. At most ``secret_policy.MAX_ON_DEMAND_READS`` names go to the cluster per
attempt; a name read twice is answered from this attempt's memory (one audit record).
One thread serves the attempt's requests one at a time; it ends with the attempt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from raftsched import secrets as sx
from raftsched.core import secret_policy as policy
from raftsched.errors import ReadRefused

log = logging.getLogger(__name__)

SOCKET_ENV = "RAFTSCHED_SECRETS_SOCKET"
MAX_REQUEST_BYTES = 1024
IO_TIMEOUT = 10.0  # seconds a peer may take to send its request
SESSION_WAIT = 5.0  # seconds to wait for the attempt's leader pid to be known
NOT_FOUND, RESTRICTED, REFUSED = "not_found", "restricted", "refused"


Resolve = Callable[[str, str], str]  # (kind, name) -> value, or ReadRefused


class SecretChannel:
    """One attempt's socket. ``session()``: the pid of the attempt's session leader (None
    until it started); ``uid``: the task's user; ``on_value(texts)``: called with what to
    mask before the task receives a value."""

    def __init__(
        self,
        resolve: Resolve,
        *,
        session: Callable[[], int | None],
        on_value: Callable[[list[str]], None],
        uid: int | None = None,
        max_reads: int = policy.MAX_ON_DEMAND_READS,
    ) -> None:
        self._resolve = resolve
        self._session = session
        self._on_value = on_value
        self._uid = os.geteuid() if uid is None else uid
        self._max_reads = max_reads
        self._reads = 0
        self._cache: dict[tuple[str, str], str] = {}
        self._closed = threading.Event()
        self.dir = tempfile.mkdtemp(prefix="raftsched-secrets-")  # 0700
        self.path = os.path.join(self.dir, "s")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(self.path)
            os.chmod(self.path, 0o600)
            if self._uid != os.geteuid():  # run_as_user: the task's user, no one else
                os.chown(self.path, self._uid, -1)
                os.chown(self.dir, self._uid, -1)
            self._sock.listen(4)
        except BaseException:
            self._sock.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self._thread = threading.Thread(target=self._serve, name="secret-channel", daemon=True)

    def env(self) -> dict[str, str]:
        return {SOCKET_ENV: self.path}

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(timeout=IO_TIMEOUT + 1)
        self._sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- serving ---------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._closed.is_set():
            ready, _, _ = select.select([self._sock], [], [], 0.2)
            if not ready:
                continue
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            with conn:
                try:
                    self._handle(conn)
                except Exception:  # one bad peer never ends the channel
                    log.exception("an on-demand secret request failed")

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(IO_TIMEOUT)
        try:
            kind, name = _request(conn)  # read first: a peer that gets an answer sent it all
        except ReadRefused as err:
            _reply(conn, {"error": str(err), "code": err.code})
            return
        why = self._peer_refusal(conn)
        if why is not None:
            log.warning("on-demand secret request refused: %s", why)
            _reply(conn, {"error": why, "code": REFUSED})
            return
        try:
            value = self._read(kind, name)
        except ReadRefused as err:
            _reply(conn, {"error": str(err), "code": err.code})
            return
        _reply(conn, {"value": value})

    def _read(self, kind: str, name: str) -> str:
        cached = self._cache.get((kind, name))
        if cached is not None:
            return cached
        if self._reads >= self._max_reads:
            raise ReadRefused(
                REFUSED,
                f"at most {self._max_reads} undeclared variables/connections per attempt:"
                " declare the ones it needs (secrets=/connections=)",
            )
        self._reads += 1
        value = self._resolve(kind, name)
        self._on_value(sx.mask_values(kind, value))  # masked before the task can print it
        self._cache[(kind, name)] = value
        return value

    def _peer_refusal(self, conn: socket.socket) -> str | None:
        if not hasattr(socket, "SO_PEERCRED"):
            return "on-demand reads need Linux (SO_PEERCRED): declare it instead"
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", creds)
        if uid != self._uid:
            return f"the peer runs as uid {uid}, not the task's"
        leader = self._leader()
        if leader is None or session_of(pid) != leader:
            return f"process {pid} is not in this attempt's session"
        return None

    def _leader(self) -> int | None:
        deadline = time.monotonic() + SESSION_WAIT
        while True:  # the task may ask before the worker learned its leader's pid
            leader = self._session()
            if leader is not None or time.monotonic() >= deadline or self._closed.is_set():
                return leader
            time.sleep(0.02)


def session_of(pid: int) -> int | None:
    """The session id of ``pid`` (Linux /proc), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) "
    try:
        return int(fields[3])  # state ppid pgrp session
    except (IndexError, ValueError):
        return None


def _request(conn: socket.socket) -> tuple[str, str]:
    data = b""
    while b"\n" not in data and len(data) <= MAX_REQUEST_BYTES:
        chunk = conn.recv(MAX_REQUEST_BYTES + 1 - len(data))
        if not chunk:
            break
        data += chunk
    if len(data) > MAX_REQUEST_BYTES:
        raise ReadRefused(REFUSED, f"a request is at most {MAX_REQUEST_BYTES} bytes")
    try:
        message: Any = json.loads(data.split(b"\n", 1)[0].decode())
        kind, name = message["kind"], message["name"]
    except (ValueError, KeyError, TypeError):
        raise ReadRefused(REFUSED, 'expected {"kind": ..., "name": ...}') from None
    if kind not in sx.KINDS or not isinstance(name, str):
        raise ReadRefused(REFUSED, f"kind must be one of {', '.join(sx.KINDS)}")
    try:
        return kind, sx.check_key(name)
    except ValueError as err:
        raise ReadRefused(REFUSED, str(err)) from None


def _reply(conn: socket.socket, message: dict[str, str]) -> None:
    with contextlib.suppress(OSError):  # the task went away: nothing to answer
        conn.sendall(json.dumps(message).encode() + b"\n")


@contextlib.contextmanager
def serving(channel: SecretChannel | None) -> Iterator[SecretChannel | None]:
    """``channel`` started for the block and closed after it (None: nothing)."""
    if channel is None:
        yield None
        return
    channel.start()
    try:
        yield channel
    finally:
        channel.close()


__all__ = [
    "MAX_REQUEST_BYTES",
    "NOT_FOUND",
    "REFUSED",
    "RESTRICTED",
    "SOCKET_ENV",
    "SecretChannel",
    "serving",
    "session_of",
]
