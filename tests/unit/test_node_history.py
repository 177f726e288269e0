"""A node's in-memory history (raftsched/api/node_history.py): events on changes only, a
sample every SAMPLE_SECONDS with the commit latency of the interval, bounded rings."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Histogram

from raftsched.api import node_history
from raftsched.api.node_history import NodeHistory


class _Node:
    def __init__(self) -> None:
        self.status: dict[str, Any] = {
            "role": "follower",
            "term": 1,
            "leader": "a:1",
            "commit_index": 10,
            "applied_index": 7,
        }
        self.members = ["a:1", "b:1", "c:1"]
        self.now = 1000.0


def _history(node: _Node, histogram: Any = None) -> NodeHistory:
    return NodeHistory(lambda: node.status, lambda: node.members, histogram, clock=lambda: node.now)


def test_events_only_when_something_changes() -> None:
    node = _Node()
    history = _history(node)
    history.tick()
    history.tick()
    assert [e[1] for e in history.events] == ["start"]
    node.status.update(term=2, leader="b:1")
    node.members = ["a:1", "b:1", "d:1"]
    history.tick()
    kinds = [(e[1], e[3]) for e in history.events][1:]
    assert kinds == [
        ("election", "term 1 -> 2"),
        ("leader_change", "b:1"),
        ("member_added", "d:1"),
        ("member_removed", "c:1"),
    ]
    proto = history.to_proto()
    assert [e.kind for e in proto.events][:2] == ["start", "election"] and proto.events[1].term == 2


def test_samples_every_interval_with_lag_and_the_intervals_mean_latency() -> None:
    node = _Node()
    latency = Histogram("t_commit_seconds", "t", registry=CollectorRegistry())
    history = _history(node, latency)
    history.tick()  # the first sample: no previous totals, no latency
    latency.observe(0.1)
    latency.observe(0.3)
    node.now += 1
    history.tick()  # too soon for another sample
    node.now += node_history.SAMPLE_SECONDS
    node.status["applied_index"] = 10
    history.tick()
    node.now += node_history.SAMPLE_SECONDS
    history.tick()  # nothing proposed since: no latency
    samples = [(s[2], s[3]) for s in history.samples]
    assert samples[0] == (3, None) and samples[2] == (0, None)
    assert samples[1][0] == 0 and abs(samples[1][1] - 0.2) < 1e-9
    proto = history.to_proto().samples
    assert proto[1].HasField("commit_latency_seconds") and not proto[2].HasField(
        "commit_latency_seconds"
    )


def test_the_rings_are_bounded() -> None:
    node = _Node()
    history = _history(node)
    for i in range(node_history.MAX_SAMPLES + 10):
        node.status["term"] = i + 1
        node.now += node_history.SAMPLE_SECONDS
        history.tick()
    assert len(history.samples) == node_history.MAX_SAMPLES
    assert len(history.events) == node_history.MAX_EVENTS
