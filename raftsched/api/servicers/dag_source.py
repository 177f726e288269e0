"""GetDagSource: a DAG's file as this node has it, bounded, for the web UI's code view.

Every node keeps the DAG folder (whichever leads parses it: ``raftsched/cluster/parsing.py``),
so any node can answer with the text the leader parsed, unless the file changed since (then
``file_modified`` is after ``parsed_at``, and the next parse picks it up). The path is the DAG
record's ``fileloc``, never one the caller names; only a regular file is read (a FIFO or a
device at that path is an error, never a blocked thread), at most :data:`MAX_SOURCE_BYTES`.
A mixin of :class:`~raftsched.api.servicers.dags.DagServicer` (it has ``ctx``).
"""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from typing import Any

import grpc

from raftsched.api.gen import dag_pb2
from raftsched.api.servicers import bounds
from raftsched.api.servicers.convert import ts
from raftsched.api.status import invalid_argument, translate_errors
from raftsched.errors import DagNotFound

MAX_SOURCE_BYTES = 512 * 1024  # a DAG file longer than this is shown cut, and says so


def read_bounded(path: str, most: int = MAX_SOURCE_BYTES) -> tuple[bytes, int, float]:
    """(the first ``most`` + 1 bytes at most, the size, the mtime) of a regular file; OSError
    (ValueError for what is no regular file) otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        chunks, left = [], most + 1
        while left > 0:
            chunk = os.read(fd, min(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), info.st_size, info.st_mtime
    finally:
        os.close(fd)


class DagSourceMixin:
    ctx: Any

    @translate_errors
    def GetDagSource(self, request: Any, context: grpc.ServicerContext) -> Any:
        if not request.dag_id:
            raise invalid_argument("dag_id", request.dag_id, "must not be empty")
        dag_id = bounds.ident("dag_id", request.dag_id)
        view = self.ctx.view()
        record = view.dag(dag_id)
        if record is None:
            raise DagNotFound(dag_id)
        fileloc = record.spec.fileloc
        out = dag_pb2.GetDagSourceResponse(
            fileloc=fileloc,
            spec_hash=record.spec.spec_hash,
            max_bytes=MAX_SOURCE_BYTES,
            freshness=self.ctx.view_freshness(view),
        )
        if record.updated_at is not None:
            out.parsed_at.CopyFrom(ts(record.updated_at))
        try:
            data, size, mtime = read_bounded(fileloc)
        except (OSError, ValueError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            out.error = f"cannot read {fileloc} on node {self.ctx.node_id}: {why}"
            return out
        out.size_bytes = size
        out.truncated = len(data) > MAX_SOURCE_BYTES
        out.source = data[:MAX_SOURCE_BYTES].decode("utf-8", errors="replace")
        out.file_modified.FromDatetime(datetime.fromtimestamp(mtime, UTC))
        return out
