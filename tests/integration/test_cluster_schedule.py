"""Three real scheduler nodes: a leader is elected and runs land in the DB, one per slot.

Also invariant 5: whatever two nodes report at the same digest_index is the same digest.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from harness import (
    ClusterHarness,
    second_dags,
    second_slots,
    utcnow,
    wait_for,
    wait_for_slots,
    whole_second,
)

pytestmark = pytest.mark.slow


def test_leader_elected_and_runs_created_on_schedule(tmp_path: Path, db_url: str) -> None:
    now = whole_second(utcnow())
    start, end = now - timedelta(seconds=3), now + timedelta(seconds=8)
    dags = second_dags(2, start=start, end=end)
    expected = {f"every_second_{i}": second_slots(start, end) for i in range(2)}

    with ClusterHarness(tmp_path, db_url, dags=dags) as cluster:
        cluster.start()
        leader = cluster.wait_leader(timeout=60)
        status = cluster.status(leader)
        assert status is not None
        assert status["address"] == cluster.addresses[leader]
        assert status["became_leader_at"] is not None

        # Runs appear while time passes (not only as a catch-up burst at the start).
        wait_for(
            lambda: len(cluster.runs()) >= 2 * 4,
            timeout=60,
            what="the catch-up runs in the DB",
            describe=cluster.brief,
        )
        wait_for_slots(cluster, expected, timeout=60)
        cluster.wait_caught_up(timeout=60)

        # Followers name the same leader and term; the leader's /status is internally sane.
        statuses = [cluster.status(i) for i in range(3)]
        assert all(statuses), cluster.brief()
        assert {s["leader"] for s in statuses if s} == {cluster.addresses[leader]}
        assert len({s["term"] for s in statuses if s}) == 1
        leader_status = statuses[leader]
        assert leader_status is not None
        assert leader_status["applied_index"] <= leader_status["commit_index"]
        assert leader_status["outbox_acked_seq"] <= leader_status["outbox_last_seq"]
        assert leader_status["backpressure"] is False

        # Digests: after settling, every node reaches the same digest_index; compare there.
        wait_for(
            lambda: cluster.recorder.digest_comparisons() >= 1,
            timeout=30,
            what="two nodes reporting a digest at the same index",
            describe=lambda: cluster.digest_samples(),
        )
        cluster.assert_replicas_agree(min_comparisons=1)
