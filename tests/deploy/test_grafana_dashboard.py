"""deploy/grafana/raftsched.json: valid Grafana dashboard JSON whose every query names only
series a scheduler node or a worker serves (``raftsched.cluster.metrics.METRIC_NAMES``,
``raftsched.worker.metrics.WORKER_METRIC_NAMES``; tests/integration/test_node_metrics.py and
test_queues_e2e.py check them against a real node's and a real worker's scrape)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from raftsched.cluster.metrics import METRIC_NAMES
from raftsched.worker.metrics import WORKER_METRIC_NAMES

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "raftsched.json"
NAME = re.compile(r"\braftsched_[a-z0-9_]+")


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def dashboard_metric_names() -> set[str]:
    return {name for expr in exprs(load()) for name in NAME.findall(expr)}


def test_the_dashboard_is_valid_json_with_panels_and_queries() -> None:
    dashboard = load()
    assert dashboard["title"] and dashboard["uid"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    for panel in panels:
        assert panel["title"] and panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance", "worker"} <= variables


def test_every_metric_the_dashboard_uses_is_served() -> None:
    used = dashboard_metric_names()
    unknown = used - set(METRIC_NAMES) - set(WORKER_METRIC_NAMES)
    assert not unknown, f"the dashboard queries series nothing serves: {sorted(unknown)}"


def test_the_key_series_have_a_panel() -> None:
    used = {re.sub(r"_(bucket|count|sum)$", "", name) for name in dashboard_metric_names()}
    for key in (
        "raftsched_raft_role",
        "raftsched_raft_term",
        "raftsched_leader_changes_total",
        "raftsched_commit_latency_seconds",
        "raftsched_apply_latency_seconds",
        "raftsched_raft_log_entries",
        "raftsched_snapshot_duration_seconds",
        "raftsched_snapshot_failures_total",
        "raftsched_outbox_backlog",
        "raftsched_outbox_quarantined",
        "raftsched_runs",
        "raftsched_task_instances",
        "raftsched_leases_granted_total",
        "raftsched_leases_expired_total",
        "raftsched_schedule_lag_seconds",
        "raftsched_db_write_latency_seconds",
        "raftsched_dag_parse_duration_seconds",
        "raftsched_dag_parse_errors_total",
        *WORKER_METRIC_NAMES,
    ):
        assert key in used, key


def test_rate_and_increase_only_read_counters() -> None:
    """rate()/increase() of a gauge is meaningless; the names say which series count up
    (tests/deploy/test_metric_names.py holds the names to that)."""
    wrong = [
        name
        for expr in exprs(load())
        for name in re.findall(r"\b(?:rate|irate|increase)\((raftsched_[a-z0-9_]+)", expr)
        if not name.endswith(("_total", "_bucket", "_count", "_sum"))
    ]
    assert not wrong, wrong
