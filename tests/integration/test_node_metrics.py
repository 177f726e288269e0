"""A real scheduler node answers ``GET /metrics`` (Prometheus text) on its admin endpoint, and
reports the outbox entries in quarantine there, in ``/status`` and in `cluster status`."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from harness import ClusterHarness, free_ports, wait_for

from raftsched.cli.main import main
from raftsched.core.model import OutboxEntry, OutboxKind
from raftsched.store import quarantine as q

VIEWER = "metrics-viewer-token-1"


def _seed_quarantine(db_url: str) -> None:
    entry = OutboxEntry(seq=1, kind=OutboxKind.TASK_LOG, data={"dag_id": "d", "text": "\x00"})
    engine = sa.create_engine(db_url)
    try:
        with engine.begin() as conn:
            q.put(conn, [q.quarantine_row(entry, "NUL refused", datetime.now(UTC))])
    finally:
        engine.dispose()


def _metrics(admin_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    samples = [line.split() for line in text.splitlines() if line and not line.startswith("#")]
    return {name: float(value) for name, value in samples}


def test_metrics_and_quarantine_count_of_a_real_node(
    tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ports = free_ports(1, offsets=(0, 100, 200))
    api = {"viewer_tokens": VIEWER}
    with ClusterHarness(tmp_path, db_url, nodes=1, ports=ports, config={"api": api}) as cluster:
        cluster.migrate()
        _seed_quarantine(db_url)
        cluster.start()

        def leading() -> dict[str, Any] | None:
            status = cluster.status(0)
            ok = status and status["role"] == "leader" and status.get("quarantined") == 1
            return status if ok else None

        status = wait_for(leading, timeout=60, what="a leader counting 1 quarantined entry")
        assert status["apply_error"] is None

        metrics = wait_for(
            lambda: (m := _metrics(cluster.nodes[0].admin_url)).get("raftsched_db_ok") and m,
            timeout=30,
            what="metrics with raftsched_db_ok 1",
        )
        assert metrics["raftsched_is_leader"] == 1
        assert metrics["raftsched_apply_halted"] == 0
        assert metrics["raftsched_outbox_quarantined_total"] == 1
        assert metrics["raftsched_raft_term"] >= 1
        assert metrics["raftsched_applied_index"] >= 1
        assert metrics["raftsched_outbox_backlog"] >= 0

        assert main(["cluster", "status", "--nodes", cluster.addresses[0]]) == 0
        header, row = capsys.readouterr().out.splitlines()[:2]
        column = header.split().index("QUARANTINED")
        assert row.split()[column] == "1"

        server = f"127.0.0.1:{ports[0] + 200}"
        argv = ["cluster", "status", "--server", server, "--token", VIEWER, "-o", "json"]
        assert main(argv) == 0
        [node] = json.loads(capsys.readouterr().out)["nodes"]
        assert node["quarantined"] == 1 and node["error"] == ""
