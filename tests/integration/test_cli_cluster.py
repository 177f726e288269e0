"""The admin CLI against three real scheduler nodes (and one real worker): every command
reaches the cluster over gRPC at the addresses the config implies (Raft port + 200), with
tokens of each role, and answers 3 once the cluster is gone."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from harness import ClusterHarness, child_env, free_ports, wait_for

from raftsched.cli.main import main

pytestmark = pytest.mark.slow

TOKENS = {
    "admin": "cli-admin-token-0123",
    "operator": "cli-operator-token-0123",
    "viewer": "cli-viewer-token-0123",
    "worker": "cli-worker-token-0123",
}
DAG = textwrap.dedent(
    """\
    from raftsched import DAG, BashTask

    with DAG("cli_manual", schedule=None, tags=["cli"], description="for the CLI test"):
        hello = BashTask("hello", command="echo hello-from-cli-test")
        bye = BashTask("bye", command="echo bye")
        hello >> bye
    """
)


class Cli:
    def __init__(self, cluster: ClusterHarness, capsys: pytest.CaptureFixture[str]) -> None:
        self.cluster = cluster
        self.capsys = capsys

    def __call__(
        self, *words: str, token: str = "admin", output: str = "json", timeout: float = 10
    ) -> tuple[int, str, str]:
        argv = ["--config", str(self.cluster.config_path), *words]
        argv += ["--token", TOKENS[token], "--output", output, "--timeout", str(timeout)]
        self.capsys.readouterr()
        code = main(argv)
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def json(self, *words: str, token: str = "admin") -> dict:
        code, out, err = self(*words, token=token)
        assert code == 0, f"raftsched {' '.join(words)} exited {code}: {err}"
        return json.loads(out)


def test_admin_cli_against_a_real_cluster(
    tmp_path: Path,
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("RAFTSCHED_SERVER", "RAFTSCHED_TOKEN", "RAFTSCHED_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    api = {f"{role}_tokens": token for role, token in TOKENS.items()}
    ports = free_ports(3, offsets=(0, 100, 200))
    with ClusterHarness(
        tmp_path, db_url, dags={"cli_manual.py": DAG}, config={"api": api}, ports=ports
    ) as cluster:
        cluster.start()
        leader = cluster.wait_leader(timeout=60)
        cli = Cli(cluster, capsys)

        # cluster status over gRPC: every member, the leader named
        wait_for(
            lambda: cli("cluster", "status", token="viewer", timeout=2)[0] == 0,
            timeout=60,
            what="`cluster status` over gRPC to exit 0",
            describe=lambda: cli("cluster", "status", token="viewer", timeout=2),
        )
        status = cli.json("cluster", "status", token="viewer")
        assert status["leader"] == cluster.addresses[leader]
        assert sorted(n["node_id"] for n in status["nodes"]) == sorted(cluster.addresses)
        assert {n["api_address"] for n in status["nodes"]} == {
            f"127.0.0.1:{port + 200}" for port in ports
        }
        code, out, _ = cli("cluster", "status", output="table")
        assert code == 0 and f"leader: {cluster.addresses[leader]}" in out

        # DAGs: listed once parsed, shown, paused by an operator only
        wait_for(
            lambda: "cli_manual" in cli("dags", "list", output="table")[1],
            timeout=60,
            what="cli_manual in `dags list`",
        )
        shown = cli.json("dags", "show", "cli_manual", token="viewer")
        assert [t["task_id"] for t in shown["tasks"]] == ["bye", "hello"]
        assert shown["dag"]["tags"] == ["cli"]
        code, _, err = cli("dags", "pause", "cli_manual", token="viewer")
        assert code == 1 and "needs role operator" in err
        assert cli.json("dags", "pause", "cli_manual", token="operator")["changed"] is True
        paused = cli.json("dags", "list", "--paused")
        assert [d["dag_id"] for d in paused["dags"]] == ["cli_manual"]
        assert cli.json("dags", "unpause", "cli_manual", token="operator")["changed"] is True
        code, _, err = cli("dags", "show", "nope")
        assert code == 1
        assert "dag 'nope' not found: `raftsched dags list` shows the known DAGs" in err
        assert cli.json("dags", "errors")["import_errors"] == []

        # a manual run, executed by a real worker; its log read back
        run = cli.json("dags", "trigger", "cli_manual", "--conf", '{"x": 1}', "--run-id", "r1")
        assert run["run"]["run_id"] == "r1"
        code, _, err = cli("dags", "trigger", "cli_manual", "--run-id", "r1")
        assert code == 1 and "pass another --run-id" in err
        worker = _start_worker(cluster, ports)
        try:
            wait_for(
                lambda: (
                    {
                        ti["state"]
                        for ti in cli.json("tasks", "list", "cli_manual", "r1")["task_instances"]
                    }
                    == {"success"}
                ),
                timeout=90,
                what="both tasks of run r1 to succeed",
                describe=lambda: cli("tasks", "list", "cli_manual", "r1", output="table"),
            )
        finally:
            worker.terminate()
            worker.wait(timeout=30)
        code, out, _ = cli("tasks", "logs", "cli_manual", "r1", "hello", output="table")
        assert code == 0 and "hello-from-cli-test" in out
        runs = cli.json("runs", "list", "cli_manual")
        assert [r["run_id"] for r in runs["runs"]] == ["r1"]
        assert cli.json("tasks", "mark", "cli_manual", "r1", "bye", "--state", "failed")[
            "marked_task_ids"
        ] == ["bye"]
        assert cli.json("tasks", "clear", "cli_manual", "r1", "bye")["cleared_task_ids"] == ["bye"]

        # users: created from stdin, listed, deleted; admin only
        monkeypatch.setattr("sys.stdin", io.StringIO("a-long-password\n"))
        created = cli.json("users", "create", "ada", "--role", "viewer", "--password-stdin")
        assert created["user"]["role"] == "viewer"
        users = cli.json("users", "list")["users"]
        assert [u["username"] for u in users] == ["ada"]
        assert cli("users", "list", token="operator")[0] == 1
        assert cli.json("users", "delete", "ada")["deleted"] is True

        # leadership moves on request
        moved = cli.json("cluster", "transfer-leader")
        assert moved["leader_id"] in cluster.addresses
        assert moved["leader_id"] != cluster.addresses[leader]

        # the whole cluster gone: exit 3, one line
        cluster.close()
        code, out, err = cli("cluster", "status", timeout=1)
        assert code == 3 and out == ""
        assert len(err.splitlines()) == 1
        code, out, err = cli("dags", "list", timeout=1)
        assert code == 3 and "no raftsched node could serve ListDags" in err


def _start_worker(cluster: ClusterHarness, ports: list[int]) -> subprocess.Popen[bytes]:
    servers = ",".join(f"127.0.0.1:{port + 200}" for port in ports)
    argv = [sys.executable, "-m", "raftsched", "--config", str(cluster.config_path), "worker"]
    argv += ["--server", servers, "--token", TOKENS["worker"]]
    log = open(cluster.log_dir / "worker.log", "ab")  # noqa: SIM115 (the child holds it)
    try:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True
        )
    finally:
        log.close()
