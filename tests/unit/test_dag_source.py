"""GetDagSource's file read (raftsched/api/servicers/dag_source.py): a regular file only,
bounded, never blocking on a FIFO put where a DAG file was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftsched.api.servicers.dag_source import read_bounded


def test_reads_a_regular_file_with_its_size(tmp_path: Path) -> None:
    path = tmp_path / "dag.py"
    path.write_text("print('hi')\n")
    data, size, mtime = read_bounded(str(path))
    assert data == b"print('hi')\n" and size == 12 and mtime == path.stat().st_mtime


def test_reads_at_most_the_bound_plus_one(tmp_path: Path) -> None:
    path = tmp_path / "big.py"
    path.write_bytes(b"x" * 1000)
    data, size, _ = read_bounded(str(path), most=100)
    assert len(data) == 101 and size == 1000  # one more: the caller knows it is cut


def test_a_fifo_or_a_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "dag.py"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        read_bounded(str(fifo))
    with pytest.raises((ValueError, OSError)):
        read_bounded(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        read_bounded(str(tmp_path / "gone.py"))
