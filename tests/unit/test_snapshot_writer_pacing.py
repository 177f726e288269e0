"""The forked snapshot writer stays out of the node's way (cluster/snapshots.py): it runs at
the lowest CPU priority and flushes its file to disk a few MiB at a time."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from raftsched.cluster import snapshots
from raftsched.cluster.snapshots import PacedWriter, yield_to_the_node


def test_the_writer_child_runs_at_the_lowest_priority() -> None:
    pid = os.fork()
    if pid == 0:  # report the child's niceness after the call as its exit status
        yield_to_the_node()
        os._exit(os.nice(0))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == snapshots.SNAPSHOT_NICE


def test_a_paced_file_flushes_every_few_mib_and_holds_all_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushed: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(snapshots, "FLUSH_EVERY", 1 << 20)
    monkeypatch.setattr(snapshots.os, "fdatasync", lambda fd: (flushed.append(fd), real(fd)))
    piece = os.urandom(1 << 16)  # 64 KiB that gzip cannot shrink, written as pickle does
    path = tmp_path / "dump"
    with (
        open(path, "wb") as raw,
        gzip.GzipFile(fileobj=PacedWriter(raw), mode="wb", compresslevel=3) as out,  # type: ignore[arg-type]
    ):
        for _ in range(80):
            out.write(piece)
    assert 4 <= len(flushed) <= 6
    assert gzip.decompress(path.read_bytes()) == piece * 80
