"""The on-demand channel between a task and its worker (worker/secret_channel.py, the task's
side raftsched/secret_client.py): a process of the attempt's session reads a value (masked
before it gets it), gets KeyError for a name that is not set and SecretAccessDenied for a
restricted one; a process outside the session, an oversized request and reads past the bound
are refused; the socket is its user's only."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raftsched.errors import ReadRefused
from raftsched.masking import StreamMasker
from raftsched.worker import secret_channel as sc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_PEERCRED")

ROOT = str(Path(__file__).resolve().parents[2])
VALUES = {("variable", "X"): "value-x-1234", ("connection", "db"): "postgresql://u:pw-5678@h/d"}

CHILD = textwrap.dedent(
    """\
    import json
    from raftsched import secrets
    from raftsched.errors import SecretAccessDenied
    out = {}
    out["x"] = secrets.get_variable("X")
    out["x_again"] = secrets.get_variable("X")
    out["db_password"] = secrets.get_connection("db").password
    out["default"] = secrets.get_variable("MISSING", "fallback")
    for name in ("MISSING", "R"):
        try:
            secrets.get_variable(name)
        except KeyError as err:
            out[name] = ["KeyError", str(err)]
        except SecretAccessDenied as err:
            out[name] = ["SecretAccessDenied", str(err)]
    print(json.dumps(out))
    """
)


class Resolver:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, kind: str, name: str) -> str:
        self.calls.append((kind, name))
        if name == "R":
            raise ReadRefused(sc.RESTRICTED, "variable R is restricted to DAGs a,b")
        value = VALUES.get((kind, name))
        if value is None:
            raise ReadRefused(sc.NOT_FOUND, f"no {kind} {name!r}")
        return value


def _channel(resolver: Resolver, leader: list[int], masked: list[str], **kw) -> sc.SecretChannel:  # type: ignore[no-untyped-def]
    return sc.SecretChannel(
        resolver, session=lambda: leader[0] if leader else None, on_value=masked.extend, **kw
    )


def _run_child(channel: sc.SecretChannel, leader: list[int]) -> dict:  # type: ignore[type-arg]
    env = {**os.environ, "PYTHONPATH": ROOT, **channel.env()}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # leads its own session, as an attempt's guard does
    )
    leader.append(proc.pid)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


def test_a_process_of_the_attempt_reads_values_masked_before_it_gets_them() -> None:
    resolver, leader, masked = Resolver(), [], []
    channel = _channel(resolver, leader, masked)
    assert stat.S_IMODE(os.stat(channel.dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(channel.path).st_mode) == 0o600
    with sc.serving(channel):
        seen = _run_child(channel, leader)
    assert seen["x"] == seen["x_again"] == "value-x-1234"
    assert seen["db_password"] == "pw-5678"
    assert seen["default"] == "fallback"
    assert seen["MISSING"][0] == "KeyError" and "no variable 'MISSING'" in seen["MISSING"][1]
    assert seen["R"] == ["SecretAccessDenied", "variable R is restricted to DAGs a,b"]
    # read once each (the client and the channel keep what they read); masked: the value, and
    # a connection's password as well as the whole URI
    assert resolver.calls.count(("variable", "X")) == 1
    assert {"value-x-1234", "pw-5678", VALUES[("connection", "db")]} <= set(masked)
    assert not os.path.exists(channel.dir)  # closed with the attempt


def _ask(path: str, payload: bytes) -> dict:  # type: ignore[type-arg]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(path)
        sock.sendall(payload)
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def test_a_process_outside_the_attempts_session_is_refused() -> None:
    resolver = Resolver()
    channel = _channel(resolver, [os.getpid() + 10**6], [])  # no such session leader
    with sc.serving(channel):
        answer = _ask(channel.path, b'{"kind": "variable", "name": "X"}\n')
    assert answer["code"] == sc.REFUSED and "not in this attempt's session" in answer["error"]
    assert "value" not in answer and resolver.calls == []


def test_requests_and_reads_are_bounded() -> None:
    resolver = Resolver()
    me = os.getsid(0)  # this process's session stands for the attempt's
    channel = _channel(resolver, [me], [], max_reads=2)
    with sc.serving(channel):
        big = _ask(channel.path, b'{"kind": "variable", "name": "' + b"X" * 2000 + b'"}\n')
        assert big["code"] == sc.REFUSED and "at most" in big["error"]
        kind = _ask(channel.path, b'{"kind": "token", "name": "X"}\n')
        assert kind["code"] == sc.REFUSED
        name = _ask(channel.path, b'{"kind": "variable", "name": "../x"}\n')
        assert name["code"] == sc.REFUSED
        assert _ask(channel.path, b'{"kind": "variable", "name": "X"}\n')["value"]
        assert _ask(channel.path, b'{"kind": "variable", "name": "NO"}\n')["code"] == sc.NOT_FOUND
        again = _ask(channel.path, b'{"kind": "variable", "name": "X"}\n')  # kept: no read
        assert again["value"] == "value-x-1234"
        over = _ask(channel.path, b'{"kind": "variable", "name": "Y"}\n')
        assert over["code"] == sc.REFUSED and "at most 2" in over["error"]
    assert resolver.calls == [("variable", "X"), ("variable", "NO")]


def test_without_a_channel_an_undeclared_name_says_how_to_declare_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from raftsched import secrets

    monkeypatch.delenv(sc.SOCKET_ENV, raising=False)
    with pytest.raises(KeyError, match="declare it"):
        secrets.get_variable("NOT_DECLARED_ANYWHERE")
    assert secrets.get_variable("NOT_DECLARED_ANYWHERE", "d") == "d"


def test_a_stream_masker_masks_values_added_while_it_runs() -> None:
    masker = StreamMasker([])
    assert masker.feed("before secret-9876 ") == "before secret-9876 "
    masker.add(["secret-9876"])
    assert masker.feed("after secret-98") + masker.feed("76\n") + masker.flush() == ("after ***\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="run_as_user: needs root")
def test_under_run_as_user_the_socket_is_the_task_users_and_only_it_may_read() -> None:
    import pwd

    nobody = pwd.getpwnam("nobody")
    resolver, leader, masked = Resolver(), [], []
    channel = _channel(resolver, leader, masked, uid=nobody.pw_uid)
    assert os.stat(channel.dir).st_uid == os.stat(channel.path).st_uid == nobody.pw_uid
    with sc.serving(channel):
        # a process of the attempt's session, but of the worker's user: refused
        answer = _ask_from_session(channel, leader)
        assert answer["code"] == sc.REFUSED and "not the task's" in answer["error"]
        leader.clear()
        env = {"PYTHONPATH": ROOT, "PATH": os.environ.get("PATH", ""), **channel.env()}
        try:
            proc = subprocess.Popen(
                [_python_for_others(), "-c", CHILD],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                user=nobody.pw_uid,
                group=nobody.pw_gid,
                extra_groups=[],
            )
        except PermissionError:
            pytest.skip("nobody may not run this checkout's Python (the refusal was checked)")
        leader.append(proc.pid)
        out, err = proc.communicate(timeout=60)
    if proc.returncode != 0 and b"Permission denied" in err:
        pytest.skip("nobody cannot read this checkout (the refusal was checked)")
    assert proc.returncode == 0, err.decode()
    assert json.loads(out)["x"] == "value-x-1234"


def _python_for_others() -> str:
    """Ours when another user may run it; otherwise the system's of the same version (ours
    often lives under /root, which nobody may not enter). The child needs only the stdlib."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/local/bin/{version}", f"/usr/bin/{version}"):
        path, runnable = os.path.realpath(python), True
        while path != "/":
            path = os.path.dirname(path)
            runnable = runnable and bool(os.stat(path).st_mode & 0o001)
        if runnable and os.path.exists(python) and os.stat(python).st_mode & 0o001:
            return python
    return sys.executable


def _ask_from_session(channel: sc.SecretChannel, leader: list[int]) -> dict:  # type: ignore[type-arg]
    code = (
        "import socket,sys;s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);"
        's.sendall(b\'{"kind": "variable", "name": "X"}\\n\');'
        "sys.stdout.write(s.makefile().readline())"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, channel.path], stdout=subprocess.PIPE, start_new_session=True
    )
    leader.append(proc.pid)
    out, _ = proc.communicate(timeout=30)
    return json.loads(out)


def test_the_longest_value_of_astral_characters_fits_the_reply() -> None:
    from raftsched import secret_client
    from raftsched.core.limits import MAX_SECRET_VALUE_CHARS

    value = "\U0001f600" * MAX_SECRET_VALUE_CHARS
    reply = json.dumps({"value": value}).encode() + b"\n"
    assert len(reply) <= secret_client.MAX_REPLY_BYTES
