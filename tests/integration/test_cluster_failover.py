"""Invariant 1 across leader crashes and a full-cluster crash: exactly one run per slot.

DAGs fire every second with catch-up and an end_date, so the expected set of runs is finite
and computed here from start and end; after healing, the DB must hold exactly that set.
"""

from __future__ import annotations

import time
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

DAG_COUNT = 3


def _expected(start, end):  # type: ignore[no-untyped-def]
    return {f"every_second_{i}": second_slots(start, end) for i in range(DAG_COUNT)}


def test_kill_9_the_leader_repeatedly(tmp_path: Path, db_url: str) -> None:
    now = whole_second(utcnow())
    start, end = now - timedelta(seconds=5), now + timedelta(seconds=22)
    dags = second_dags(DAG_COUNT, start=start, end=end)
    total = sum(len(slots) for slots in _expected(start, end).values())

    with ClusterHarness(tmp_path, db_url, dags=dags) as cluster:
        cluster.start()
        leader = cluster.wait_leader(timeout=60)
        wait_for(lambda: cluster.runs(), timeout=60, what="first runs", describe=cluster.brief)

        victims = []
        for _ in range(3):
            time.sleep(2.0)  # let the leader create and materialize some runs
            leader = cluster.wait_leader(timeout=30)
            before = len(cluster.runs())
            cluster.kill(leader)
            victims.append(leader)
            cluster.wait_leader(timeout=30, exclude={leader})
            cluster.start_node(leader)
            # The new leader keeps going: more runs reach the DB after the kill (unless a slow
            # machine let the whole window pass already: the slot check below still holds).
            wait_for(
                lambda before=before: len(cluster.runs()) > before or len(cluster.runs()) >= total,
                timeout=30,
                what="new runs after the leader was killed",
                describe=cluster.brief,
            )
            cluster.wait_all_up(timeout=60)

        wait_for_slots(cluster, _expected(start, end), timeout=90)
        cluster.wait_caught_up(timeout=60)
        cluster.assert_replicas_agree()


def test_kill_9_every_node_then_restart(tmp_path: Path, db_url: str) -> None:
    now = whole_second(utcnow())
    start, end = now - timedelta(seconds=5), now + timedelta(seconds=14)
    dags = second_dags(DAG_COUNT, start=start, end=end)

    with ClusterHarness(tmp_path, db_url, dags=dags) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        wait_for(
            lambda: len(cluster.runs()) >= DAG_COUNT * 6,
            timeout=60,
            what="the catch-up runs",
            describe=cluster.brief,
        )
        before = len(cluster.runs())
        for index in range(3):
            cluster.kill(index)
        time.sleep(1.0)
        for index in range(3):
            cluster.start_node(index)
        cluster.wait_leader(timeout=60)
        total = sum(len(slots) for slots in _expected(start, end).values())
        wait_for(
            lambda: len(cluster.runs()) > before or len(cluster.runs()) >= total,
            timeout=60,
            what="runs after the full restart",
            describe=cluster.brief,
        )
        wait_for_slots(cluster, _expected(start, end), timeout=90)
        cluster.wait_caught_up(timeout=60)
        cluster.assert_replicas_agree()
