"""`raftsched cluster status|transfer-leader|add-node|remove-node` against a real gRPC server
with canned data; where the CLI finds the cluster; what each failure exits with."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_admin_support import TOKENS, FakeCluster, dead_address, fake_cluster, isolate

from raftsched.cli.connect import resolve_servers, resolve_token
from raftsched.cli.main import main
from raftsched.errors import NoQuorumError


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    isolate(monkeypatch, tmp_path)
    with fake_cluster(tmp_path) as cluster:
        yield cluster


def test_status_table(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("cluster", "status", token="viewer")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "NODE", "API_ADDRESS", "ROLE", "TERM", "COMMIT", "APPLIED", "LAG", "DIGEST", "OUTBOX",
        "QUARANTINED", "BACKPRESSURE", "RELEASE", "CLUSTER_VERSION",
    ]  # fmt: skip
    assert lines[1].split() == [
        "127.0.0.1:7101", "127.0.0.1:7301", "leader", "4", "42", "42", "0",
        f"{'ab' * 6}@40", "3", "-", "no", "0.1.0/r1", "1",
    ]  # fmt: skip
    assert lines[2].split()[2] == "follower" and lines[2].split()[-3] == "yes"
    assert lines[3].split() == ["127.0.0.1:7103", "-", "unreachable", *["-"] * 10]
    assert "127.0.0.1:7103: connection refused" in lines
    assert lines[-1] == "leader: 127.0.0.1:7101"


def test_status_json(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("cluster", "status", output="json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["leader"] == "127.0.0.1:7101"
    assert report["freshness"] == {
        "leader_id": "127.0.0.1:7101",
        "applied_index": 42,
        "node_id": "127.0.0.1:7101",
    }
    first, second, third = report["nodes"]
    assert first["role"] == "leader" and first["db_watermark"] == 39 and first["db_ok"] is True
    assert second["lag"] == 2 and second["db_watermark"] is None
    assert third["role"] == "unreachable" and third["error"] == "connection refused"


@pytest.mark.parametrize("output", ["table", "json"])
def test_status_without_leader_exits_3(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    fake.cluster.has_leader = False
    assert main(fake.argv("cluster", "status", output=output)) == 3
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out)["leader"] is None
    else:
        assert out.splitlines()[-1] == "leader: none (no quorum)"


@pytest.mark.parametrize("output", ["table", "json"])
def test_cluster_down_exits_3(capsys: pytest.CaptureFixture[str], output: str) -> None:
    argv = ["cluster", "status", "--server", dead_address(), "--timeout", "0.5", "-o", output]
    assert main(argv) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("raftsched: error: no raftsched node could serve GetStatus")


def test_local_admin_path_still_answers_3_when_nodes_are_down(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead = dead_address()
    assert main(["cluster", "status", "--local-admin", "--nodes", dead, "--timeout", "0.5"]) == 3
    assert "down" in capsys.readouterr().out


@pytest.mark.parametrize("output", ["table", "json"])
def test_transfer_leader(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    assert main(fake.argv("cluster", "transfer-leader", "127.0.0.1:7103", output=output)) == 0
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out)["leader_id"] == "127.0.0.1:7103"
    else:
        assert out == "leader: 127.0.0.1:7103\n"
    assert main(fake.argv("cluster", "transfer-leader")) == 0
    assert capsys.readouterr().out == "leader: 127.0.0.1:7102\n"


@pytest.mark.parametrize("output", ["table", "json"])
def test_add_and_remove_node(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    assert main(fake.argv("cluster", "add-node", "127.0.0.1:7104", output=output)) == 0
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out)["nodes"][-1] == "127.0.0.1:7104"
    else:
        assert out.startswith("added 127.0.0.1:7104; members: 127.0.0.1:7101,")
    assert main(fake.argv("cluster", "remove-node", "127.0.0.1:7101", output=output)) == 0
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out)["nodes"] == ["127.0.0.1:7102", "127.0.0.1:7103", "127.0.0.1:7104"]
    else:
        assert (
            out
            == "removed 127.0.0.1:7101; members: 127.0.0.1:7102, 127.0.0.1:7103, 127.0.0.1:7104\n"
        )


def test_remove_unknown_node_exits_1(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("cluster", "remove-node", "127.0.0.1:7999")) == 1
    err = capsys.readouterr().err
    assert err == (
        "raftsched: error: 127.0.0.1:7999 is not a member;"
        " `raftsched cluster status` lists the members\n"
    )


def test_membership_needs_admin(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("cluster", "add-node", "127.0.0.1:7104", token="operator")) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert "`raftsched cluster add-node` needs role admin; use a token with that role" in line
    assert TOKENS["operator"] not in line


def test_no_token_exits_1_with_the_way_out(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(fake.argv("cluster", "status", token=None)) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("raftsched: error: not authenticated: missing bearer token")
    assert "--token" in line


def test_token_from_environment(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAFTSCHED_TOKEN", TOKENS["viewer"])
    monkeypatch.setenv("RAFTSCHED_SERVER", f"{dead_address()},{fake.address}")
    assert main(["cluster", "status", "--timeout", "3"]) == 0
    assert "leader: 127.0.0.1:7101" in capsys.readouterr().out


def test_bad_server_address_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "status", "--server", "no-port-here"]) == 2
    assert "expected host:port" in capsys.readouterr().err


def test_unknown_subcommand_and_bare_group_are_usage_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["cluster"]) == 2
    assert "transfer-leader" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["cluster", "add-node"])  # the address is missing
    assert exit_info.value.code == 2


def test_help_shows_no_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAFTSCHED_TOKEN", "super-secret-token")
    with pytest.raises(SystemExit):
        main(["cluster", "status", "--help"])
    out = capsys.readouterr().out
    assert "--token" in out and "super-secret-token" not in out


def ns(**values: object) -> argparse.Namespace:
    return argparse.Namespace(**{"config": None, "server": None, "token": None, **values})


def test_servers_from_flag_then_env_then_config(tmp_path: Path) -> None:
    cfg = tmp_path / "raftsched.cfg"
    cfg.write_text("[cluster]\nnodes = 10.0.0.1:7101,10.0.0.2:7101\nsecret = s3\n")
    env = {"RAFTSCHED_SERVER": "e1:1, e2:2"}
    assert resolve_servers(ns(server="a:1,b:2"), env) == ["a:1", "b:2"]
    assert resolve_servers(ns(config=str(cfg)), env) == ["e1:1", "e2:2"]
    # the config's nodes at Raft port + 200, or at grpc_bind's port when it is set
    assert resolve_servers(ns(config=str(cfg)), {}) == ["10.0.0.1:7301", "10.0.0.2:7301"]
    bind_env = {"RAFTSCHED__API__GRPC_BIND": "10.0.0.1:50051", "RAFTSCHED__API__ADMIN_TOKENS": "t"}
    assert resolve_servers(ns(config=str(cfg)), bind_env) == ["10.0.0.1:50051", "10.0.0.2:50051"]


def test_single_node_uses_grpc_bind(tmp_path: Path) -> None:
    cfg = tmp_path / "raftsched.cfg"
    cfg.write_text(
        "[cluster]\nnodes = 10.0.0.5:7101\nsecret = s3\n[api]\ngrpc_bind = 0.0.0.0:6000\n"
        "admin_tokens = t\n"
    )
    assert resolve_servers(ns(config=str(cfg)), {}) == ["10.0.0.5:6000"]


def test_token_precedence() -> None:
    assert resolve_token(ns(token="flag"), {"RAFTSCHED_TOKEN": "env"}) == "flag"
    assert resolve_token(ns(), {"RAFTSCHED_TOKEN": "env"}) == "env"
    assert resolve_token(ns(), {}) is None


def test_explain_not_found_keeps_a_server_hint_and_literal_braces() -> None:
    import grpc

    from raftsched.cli.connect import explain
    from raftsched.errors import ApiError

    hinted = ApiError(grpc.StatusCode.NOT_FOUND, "run 'r' not found; `raftsched runs list d`")
    plain = ApiError(grpc.StatusCode.NOT_FOUND, "run 'r' not found")
    template = "{detail}: see `raftsched runs list`"
    assert str(explain(hinted, command="x", role="viewer", not_found=template)) == (
        "run 'r' not found; `raftsched runs list d`"
    )
    assert str(explain(plain, command="x", role="viewer", not_found=template)) == (
        "run 'r' not found: see `raftsched runs list`"
    )
    fixed = "dag 'a{b}' not found"
    assert str(explain(plain, command="x", role="viewer", not_found=fixed)) == fixed
    timeout = ApiError(grpc.StatusCode.DEADLINE_EXCEEDED, "slow", address="h:1")
    assert isinstance(explain(timeout, command="x", role="viewer"), NoQuorumError)
