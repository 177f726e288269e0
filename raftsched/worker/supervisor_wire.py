"""The task supervisor's wire protocol: :func:`send` and :func:`recv` of one message, and the
two helpers a server needs to read a spawn (:func:`_read_spec`) and to shed inherited file
descriptors (:func:`_close_all_but`). Lean on purpose (stdlib only): see ``supervisor.py``.

Messages are JSON objects on a SOCK_SEQPACKET socket, one per packet, file descriptors
attached. Worker -> server: ``spawn`` (id, deadline; fds stdin, stdout, stderr, spec: a memfd
holding the JSON spec, which only the attempt's guard reads), ``signal`` (id, signum),
``kill`` (id), ``forkserver`` (path; fd: its socket), ``retire`` (exit once no attempt
runs; a spawn that arrives first still runs), ``extend`` (id, at: the attempt's new
deadline), ``arm`` (fd: a memfd saying how to reach the cluster),
``hold`` (ref, lease: a lease the worker holds), ``drop`` (ref: no longer held) and ``poll``
(request_id, max_tasks: the Lease the worker is sending). Server ->
worker: ``started`` (id, pid), ``exit`` (id, status: the wait status, or error; ``fenced`` when
its deadline killed it), ``ready`` (stamp) / ``failed`` (message) from a fork server.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

MAX_PACKET = 1 << 16
MAX_FDS = 4
MAXFD = 1 << 20


def file_stamp(path: str) -> list[int] | None:
    """A DAG file's or a neighbour module's version, as a fork server records it and the
    worker compares it: one definition for both sides (None: the file is gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


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
