"""A real scheduler node answers ``GET /metrics`` (Prometheus text) on its admin endpoint, and
reports the outbox entries in quarantine there, in ``/status`` and in `cluster status`."""

from __future__ import annotations

import json
import re
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
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "raftsched.json"


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
        assert metrics["raftsched_outbox_quarantined"] == 1
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


# -- the series move when work runs ---------------------------------------------------------


BROKEN_DAG = "raise RuntimeError('this DAG file is broken on purpose')\n"


def _series(metrics: dict[str, float], name: str) -> float:
    """The sum of every sample of ``name`` (all label sets)."""
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


def test_series_move_when_a_scheduled_dag_runs_on_a_real_worker(
    tmp_path: Path, db_url: str
) -> None:
    from api_harness import ApiCluster
    from harness import every_second_dag

    from raftsched.cluster.metrics import METRIC_NAMES

    start = datetime.now(UTC).replace(microsecond=0)
    dags = {
        "tick.py": every_second_dag("tick", start=start, catchup=False),
        "broken.py": BROKEN_DAG,
    }
    with ApiCluster(tmp_path, db_url, nodes=1, dags=dags, lease_ttl=5) as cluster:
        cluster.start()
        wait_for(
            lambda: (cluster.status(0) or {}).get("role") == "leader", timeout=60, what="a leader"
        )
        client = cluster.client()
        cluster.wait_dags(client, {"tick"})
        admin_url = cluster.nodes[0].admin_url
        before = _metrics(admin_url)
        assert before["raftsched_leases_granted_total"] == 0
        (worker_port,) = free_ports(1, offsets=(0,))
        env = {"RAFTSCHED__WORKER__METRICS_PORT": str(worker_port)}
        cluster.start_worker("w1", concurrency=2, extra_env=env)

        def moved() -> dict[str, float] | None:
            m = _metrics(admin_url)
            done = m.get('raftsched_task_instances{state="success"}', 0) >= 2
            return m if done and m.get("raftsched_db_write_latency_seconds_count", 0) > 0 else None

        after = wait_for(moved, timeout=90, what="2 task instances succeeded, seen in /metrics")
        worker_after = _metrics(f"http://127.0.0.1:{worker_port}")

    # every series the module documents is answered (histograms with their suffixes), and
    # so is every series the Grafana dashboard queries, by a node or (its Workers row) a worker
    names = {key.split("{", 1)[0] for key in after}
    assert set(METRIC_NAMES) <= names, set(METRIC_NAMES) - names
    names |= {key.split("{", 1)[0] for key in worker_after}
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for name in re.findall(r"\braftsched_[a-z0-9_]+", target.get("expr", ""))
    }
    assert queried and queried <= names, queried - names
    assert after['raftsched_raft_role{role="leader"}'] == 1
    assert after['raftsched_raft_role{role="follower"}'] == 0
    assert after["raftsched_leader_changes_total"] >= 1
    assert after["raftsched_raft_term"] >= 1
    assert after["raftsched_raft_log_entries"] > 0
    assert after["raftsched_leases_granted_total"] >= 2
    assert after["raftsched_leases_expired_total"] == 0
    assert after["raftsched_commit_latency_seconds_count"] > before.get(
        "raftsched_commit_latency_seconds_count", 0
    )
    assert (
        after["raftsched_apply_latency_seconds_count"]
        > before["raftsched_apply_latency_seconds_count"]
    )
    assert after["raftsched_schedule_lag_seconds_count"] >= 2
    assert after["raftsched_schedule_lag_seconds_sum"] >= 0
    lag_mean = (
        after["raftsched_schedule_lag_seconds_sum"] / after["raftsched_schedule_lag_seconds_count"]
    )
    assert lag_mean < 60  # a 1-second schedule on an idle node: seconds, not minutes
    assert after["raftsched_db_write_latency_seconds_count"] > 0
    assert after["raftsched_dag_parse_duration_seconds_count"] >= 1
    assert after["raftsched_dag_parse_errors_total"] >= 1  # broken.py
    assert _series(after, "raftsched_runs") >= 2
    assert _series(after, "raftsched_task_instances") >= 2
