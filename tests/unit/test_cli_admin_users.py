"""`raftsched users create|list|delete` against a real gRPC server with canned data: the
password never comes from a flag, and each command in both output modes with its exit codes."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_admin_support import FakeCluster, dead_address, fake_cluster, isolate

from raftsched.cli.main import main


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    isolate(monkeypatch, tmp_path)
    with fake_cluster(tmp_path) as cluster:
        yield cluster


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("output", ["table", "json"])
def test_create_with_password_stdin(
    fake: FakeCluster,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    output: str,
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret-pass\n"))
    argv = fake.argv("users", "create", "ada", "--role", "operator", "--password-stdin")
    assert main([*argv, "--output", output]) == 0
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out) == {
            "user": {
                "username": "ada",
                "role": "operator",
                "created_at": "2024-03-01T10:00:00+00:00",
            }
        }
    else:
        assert out == "user 'ada' created with role operator\n"
    [request] = fake.users.created
    assert (request.username, request.password, request.role) == ("ada", "s3cret-pass", "operator")
    assert "s3cret-pass" not in out


def test_create_prompts_twice(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = iter(["pw-12345678", "pw-12345678"])
    prompts: list[str] = []
    monkeypatch.setattr("sys.stdin", Tty())
    monkeypatch.setattr("getpass.getpass", lambda prompt: prompts.append(prompt) or next(answers))
    assert main(fake.argv("users", "create", "bob", "--role", "viewer")) == 0
    assert prompts == ["Password: ", "Repeat password: "]
    assert fake.users.created[0].password == "pw-12345678"


def test_create_mismatched_passwords_exit_1_without_a_call(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = iter(["pw-12345678", "pw-other"])
    monkeypatch.setattr("sys.stdin", Tty())
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(answers))
    assert main(fake.argv("users", "create", "bob", "--role", "viewer")) == 1
    assert "the passwords do not match" in capsys.readouterr().err
    assert fake.users.created == []


def test_create_without_terminal_asks_for_password_stdin(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(fake.argv("users", "create", "bob", "--role", "viewer")) == 2
    assert "pass --password-stdin" in capsys.readouterr().err


def test_create_existing_and_replace(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("pw-12345678\npw-12345678\n"))
    argv = fake.argv("users", "create", "root", "--role", "viewer", "--password-stdin")
    assert main(argv) == 1
    assert capsys.readouterr().err == "raftsched: error: user 'root' already exists\n"
    assert main([*argv, "--replace"]) == 0
    assert capsys.readouterr().out == "user 'root' replaced with role viewer\n"


def test_create_needs_admin(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("pw-12345678\n"))
    argv = fake.argv(
        "users", "create", "x", "--role", "viewer", "--password-stdin", token="operator"
    )
    assert main(argv) == 1
    assert "`raftsched users create` needs role admin" in capsys.readouterr().err


def test_there_is_no_password_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["users", "create", "x", "--role", "viewer", "--password", "oops"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        main(["users", "create", "--help"])
    out = capsys.readouterr().out
    assert "--password-stdin" in out and "--password " not in out


@pytest.mark.parametrize("output", ["table", "json"])
def test_list(fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str) -> None:
    assert main(fake.argv("users", "list", output=output)) == 0
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out)["users"] == [
            {"username": "root", "role": "admin", "created_at": "2024-03-01T10:00:00+00:00"}
        ]
    else:
        assert out.splitlines() == [
            "USERNAME  ROLE   CREATED_AT",
            "root      admin  2024-03-01T10:00:00+00:00",
        ]


@pytest.mark.parametrize("output", ["table", "json"])
def test_delete(fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str) -> None:
    assert main(fake.argv("users", "delete", "root", output=output)) == 0
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out) == {"username": "root", "deleted": True}
    else:
        assert out == "user 'root' deleted\n"
    assert main(fake.argv("users", "delete", "root", output=output)) == 1
    assert capsys.readouterr().err == (
        "raftsched: error: user 'root' not found: `raftsched users list` shows the users\n"
    )


def test_users_cluster_down_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["users", "list", "--server", dead_address(), "--timeout", "0.5"]) == 3
    assert main(["users"]) == 2
