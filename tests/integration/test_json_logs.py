"""``[core] log_format = json``: a real scheduler node and a real worker write one JSON object
per line, each with ts, level, logger, message, node (the node's Raft address, the worker's
id) and term (the node's Raft term once its Raft node exists); the lines about a run or a task
attempt carry dag_id, run_id, task_id and try_number."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from api_harness import ApiCluster
from harness import every_second_dag, wait_for

BASE_KEYS = {"ts", "level", "logger", "message", "node", "term"}


def _json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("--- "):  # the harness's own markers
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            raise AssertionError(f"{path.name}: not a JSON line: {line!r}") from err
        assert isinstance(record, dict) and record.keys() >= BASE_KEYS, line
        out.append(record)
    return out


def test_a_node_and_a_worker_log_json_lines_with_node_term_and_task_fields(
    tmp_path: Path, sqlite_url: str
) -> None:
    start = datetime.now(UTC).replace(microsecond=0)
    dags = {"tick.py": every_second_dag("tick", start=start, catchup=False)}
    config = {"core": {"log_format": "json", "logging_level": "DEBUG"}}  # run lines are DEBUG
    with ApiCluster(
        tmp_path, sqlite_url, nodes=1, dags=dags, lease_ttl=5, config=config
    ) as cluster:
        cluster.start()
        node = cluster.nodes[0]
        wait_for(lambda: (node.status() or {}).get("role") == "leader", timeout=60, what="leader")
        worker = cluster.start_worker("json-worker", concurrency=1)

        def succeeded() -> bool:
            return any(
                r.get("message", "").startswith("tick/") and "succeeded" in r["message"]
                for r in _json_lines(worker.log_path)
            )

        wait_for(succeeded, timeout=90, what="an attempt that succeeded, in the worker log")
        term = node.status()["term"]  # type: ignore[index]
        address = node.address

    records = _json_lines(node.log_path)
    assert records, "the node logged nothing"
    assert {r["node"] for r in records} == {address}
    raft = [r for r in records if r["logger"].startswith("raftsched.cluster.leader")]
    assert raft and all(r["term"] == term for r in raft)
    created = [r for r in records if r["message"].startswith("run ") and "created" in r["message"]]
    assert created and created[0]["dag_id"] == "tick"
    assert created[0]["run_id"].startswith("scheduled__")

    work = _json_lines(worker.log_path)
    strangers = [r for r in work if r["node"] != "json-worker"]
    assert not strangers, strangers[:3]
    started = [r for r in work if r["message"].startswith("start tick/")]
    assert started, [r["message"] for r in work]
    first = started[0]
    assert first["dag_id"] == "tick" and first["task_id"] == "noop" and first["try_number"] == 1
    assert first["run_id"].startswith("scheduled__")
