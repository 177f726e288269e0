"""The worker reads an attempt's result file, which the task could replace with anything: a
link to /dev/zero, a FIFO, a huge sparse file, a directory, a socket, a link in place of its
working directory. Each is refused with a message that says what it is; none is followed,
blocks or is read past the bound.

Each hostile read runs in a child process under a 1 GiB address-space limit and a timeout,
so a reader that follows the link or blocks on the FIFO fails the test, not the test run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raftsched.dags import xcom_args
from raftsched.errors import XComError

CHILD = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from raftsched.dags import xcom_args
    from raftsched.errors import XComError
    try:
        print("read", xcom_args.read_result(sys.argv[1]))
    except XComError as err:
        print("refused", err)
    """
)


def _read_in_child(path: Path) -> str:
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {path.name} blocked")
    assert done.returncode == 0, done.stderr[-800:]
    return done.stdout.strip()


def _result(tmp_path: Path) -> Path:
    return tmp_path / xcom_args.RESULT_FILE_NAME


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _sparse(path: Path) -> None:
    with open(path, "wb") as out:
        out.truncate(8 << 30)  # 8 GiB of nothing: no disk, every byte a read


def _link_to_a_good_file(path: Path) -> None:
    good = path.with_name("elsewhere.json")
    good.write_text(json.dumps({"return_value_json": "[1]"}))
    path.symlink_to(good)


def _socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.symlink_to("/dev/zero"), "not a regular file (it is a symbolic link)"),
        (_link_to_a_good_file, "not a regular file (it is a symbolic link)"),
        (_fifo, "not a regular file (it is a FIFO)"),
        (Path.mkdir, "not a regular file (it is a directory)"),
        (_socket, "not a regular file (it is a socket)"),
        (_sparse, f"too large: {8 << 30} bytes, {xcom_args.MAX_RESULT_FILE_BYTES} bytes max"),
    ],
    ids=["link-to-dev-zero", "link-to-a-file", "fifo", "directory", "socket", "sparse-8GiB"],
)
def test_a_result_file_that_is_not_a_plain_file_is_refused_unread(
    tmp_path: Path, make: object, said: str
) -> None:
    path = _result(tmp_path)
    make(path)  # type: ignore[operator]
    out = _read_in_child(path)
    assert out.startswith("refused the result file is " + said), out
    if "regular" in said:
        assert "must not replace it" in out


def test_a_link_in_place_of_the_working_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    _result(real).write_text(json.dumps({"return_value_json": "[1]"}))
    assert _read_in_child(_result(real)) == "read ('[1]', None, False)"
    (tmp_path / "workdir").symlink_to(real)
    out = _read_in_child(_result(tmp_path / "workdir"))
    assert out.startswith(
        "refused the attempt's working directory is not a directory (it is a symbolic link)"
    ), out


def test_no_more_than_the_bound_is_read_whatever_the_size_says() -> None:
    # a /proc file is a regular file whose size says 0: only the bound stops the read
    assert os.stat("/proc/cpuinfo").st_size == 0
    with pytest.raises(XComError, match="too large: more than 64 bytes, 64 bytes max"):
        xcom_args.read_bounded("/proc/cpuinfo", 64)
    assert len(xcom_args.read_bounded("/proc/cpuinfo", 1 << 20)) > 64


def test_a_result_file_that_is_not_utf8_json_is_unreadable(tmp_path: Path) -> None:
    path = _result(tmp_path)
    for data in (b"\xff\xfe", b"[1, 2", b'"just text"'):
        path.write_bytes(data)
        with pytest.raises(XComError, match="the result file is unreadable"):
            xcom_args.read_result(str(path))
