"""The admin endpoint and `raftsched cluster status` against it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from test_cluster_support import free_ports

from raftsched.cli.cluster_cmd import build_report, fetch_status
from raftsched.cli.main import main
from raftsched.cluster.admin import AdminServer


def fake_status(address: str, role: str) -> dict:
    return {
        "node_id": address,
        "address": address,
        "pid": 1,
        "role": role,
        "term": 3,
        "leader": "127.0.0.1:7101",
        "has_quorum": True,
        "commit_index": 10,
        "applied_index": 8,
        "digest": "ab" * 32,
        "digest_index": 8,
        "outbox_size": 0,
        "outbox_last_seq": 5,
        "outbox_acked_seq": 5,
        "db_watermark": 5,
        "backpressure": False,
    }


@pytest.fixture
def admin() -> Iterator[AdminServer]:
    port = free_ports(1)[0]
    server = AdminServer(f"127.0.0.1:{port}", lambda: fake_status("127.0.0.1:7101", "leader"))
    server.start()
    yield server
    server.stop()


def test_status_endpoint(admin: AdminServer) -> None:
    status = fetch_status(admin.address, timeout=2)
    assert status is not None and status["role"] == "leader"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://{admin.address}/nope", timeout=2)
    assert err.value.code == 404


def test_report_lag_and_down_nodes() -> None:
    targets = [("127.0.0.1:7101", "a"), ("127.0.0.1:7102", "b"), ("127.0.0.1:7103", "c")]
    answers = [fake_status("127.0.0.1:7101", "leader"), None, fake_status("127.0.0.1:7103", "x")]
    report = build_report(targets, answers)
    assert report["leader"] == "127.0.0.1:7101"
    assert [n["state"] for n in report["nodes"]] == ["up", "down", "up"]
    assert report["nodes"][0]["lag"] == 2  # leader commit 10 - applied 8


def test_cli_status_exit_codes(admin: AdminServer, capsys: pytest.CaptureFixture[str]) -> None:
    host, port = admin.address.rsplit(":", 1)
    raft = f"{host}:{int(port) - 100}"  # admin port = raft port + 100
    assert main(["cluster", "status", "--nodes", raft, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["leader"] == "127.0.0.1:7101"
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    assert main(["cluster", "status", "--nodes", dead, "--timeout", "0.5"]) == 3
    assert "down" in capsys.readouterr().out
