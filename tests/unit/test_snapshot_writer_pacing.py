"""The forked snapshot writer flushes its file to disk a few MiB at a time
(raft/snapshots.py), so journal fsyncs never queue behind one large flush."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from raftsched.raft import snapshots
from raftsched.raft.snapshots import PacedWriter


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
