"""The node's Prometheus gauges and the error text of its NodeStatus, from a status dict."""

from __future__ import annotations

from typing import Any

from raftsched.api.servicers.convert import node_status
from raftsched.cluster.metrics import NodeMetrics


def _samples(status: dict[str, Any]) -> dict[str, float]:
    body, content_type = NodeMetrics(lambda: status).render()
    assert content_type.startswith("text/plain")
    lines = [line.split() for line in body.decode().splitlines() if not line.startswith("#")]
    return {name: float(value) for name, value in lines}


LEADER = {
    "role": "leader",
    "has_quorum": True,
    "term": 4,
    "commit_index": 42,
    "applied_index": 41,
    "outbox_size": 7,
    "db_watermark": 30,
    "db_ok": True,
    "quarantined": 2,
    "apply_error": None,
}


def test_leader_gauges() -> None:
    assert _samples(LEADER) == {
        "raftsched_is_leader": 1,
        "raftsched_has_quorum": 1,
        "raftsched_raft_term": 4,
        "raftsched_commit_index": 42,
        "raftsched_applied_index": 41,
        "raftsched_outbox_backlog": 7,
        "raftsched_outbox_backpressure": 0,
        "raftsched_apply_halted": 0,
        "raftsched_db_watermark": 30,
        "raftsched_db_ok": 1,
        "raftsched_outbox_quarantined": 2,
    }


def test_follower_has_no_leader_only_gauges_and_reports_a_halted_apply() -> None:
    follower = {**LEADER, "role": "follower", "apply_error": "apply failed at index 9: bug"}
    samples = _samples(follower)
    assert samples["raftsched_is_leader"] == 0 and samples["raftsched_apply_halted"] == 1
    assert not {"raftsched_db_watermark", "raftsched_db_ok"} & samples.keys()
    assert "raftsched_outbox_quarantined" not in samples


def test_each_node_has_its_own_registry() -> None:
    first, second = NodeMetrics(lambda: LEADER), NodeMetrics(lambda: {**LEADER, "term": 9})
    assert first.registry is not second.registry
    assert b"raftsched_raft_term 9.0" in second.render()[0]
    assert b"raftsched_raft_term 4.0" in first.render()[0]


def test_node_status_error_joins_every_error_and_carries_the_quarantine() -> None:
    status = {
        **LEADER,
        "fatal_error": "snapshot from a newer release",
        "apply_error": "apply failed at index 9",
        "materializer_error": "materializer: outbox entries [5] do not continue",
    }
    out = node_status(status, "127.0.0.1:7301")
    assert out.error == (
        "snapshot from a newer release; apply failed at index 9;"
        " materializer: outbox entries [5] do not continue"
    )
    assert out.quarantined == 2
    follower = node_status({**status, "role": "follower", "fatal_error": None}, "")
    assert follower.error == "apply failed at index 9" and not follower.HasField("quarantined")
    assert node_status({"role": "follower"}, "").error == ""
