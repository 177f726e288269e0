"""Issue #10 part 1: a simulated power loss of every node loses no committed entry.

The nodes run with ``RAFTSCHED_TEST_JOURNAL_SYNCED=1``: after each journal fsync a node
records the journal's durable length in ``raft.journal.synced``. The test runs a catch-up DAG
with a 1-second schedule and a real worker, kills -9 every node at once, and cuts each journal
back to its last fsynced length: exactly what a power loss may leave (the meta file, term,
vote and commit index, is only ever replaced durably). Restarted, the cluster must find every
committed entry: the leader's log reaches every fencing token already in the DB, the DB and
the log agree (no mismatch reported), every slot has exactly one run (none re-created, none
quarantined as a duplicate), and each task's attempts carry strictly increasing tokens.

Run with ``-s`` to see the counts.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from api_harness import ApiCluster
from harness import (
    every_second_dag,
    second_slots,
    utcnow,
    wait_for,
    wait_for_slots,
    whole_second,
)

from raftsched.raft.journal import SYNCED_ENV
from raftsched.store import tables as t

pytestmark = pytest.mark.slow


def _cut_to_synced(data_dir: Path) -> tuple[int, int]:
    """Truncate every journal to its last fsynced length: (journals, bytes cut)."""
    journals = cut = 0
    for synced in data_dir.rglob("raft.journal.synced"):
        journal = synced.with_name("raft.journal")
        length = int(synced.read_text().split()[0])
        size = journal.stat().st_size
        assert length <= size, (journal, length, size)
        with open(journal, "r+b") as f:
            f.truncate(length)
        journals += 1
        cut += size - length
    return journals, cut


def test_power_loss_of_every_node_loses_no_committed_entry(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SYNCED_ENV, "1")
    now = whole_second(utcnow())
    start, end = now - timedelta(seconds=5), now + timedelta(seconds=25)
    dags = {"every_second.py": every_second_dag("every_second", start=start, end=end)}
    with ApiCluster(tmp_path, db_url, dags=dags, lease_ttl=5) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        cluster.start_worker("w1", concurrency=4)
        wait_for(
            lambda: len(cluster.runs()) >= 12,
            timeout=60,
            what="a while of runs",
            describe=cluster.brief,
        )
        commits = [s["commit_index"] for s in cluster.statuses().values() if s]
        for index in range(3):
            cluster.kill(index)
        ti = t.task_instance
        with cluster.engine.connect() as conn:
            max_token = int(conn.execute(sa.select(sa.func.max(ti.c.lease_token))).scalar() or 0)
        runs_before = len(cluster.runs())
        journals, cut = _cut_to_synced(cluster.data_dir)
        assert journals == 3

        for index in range(3):
            cluster.start_node(index)
        leader = cluster.wait_leader(timeout=60)
        # Every token in the DB came from a committed entry: the restarted log reaches it.
        status = wait_for(
            lambda: (s := cluster.status(leader)) and s["commit_index"] > max_token and s,
            timeout=30,
            what="the restarted log to reach every token in the DB",
            describe=cluster.brief,
        )
        expected = {"every_second": second_slots(start, end)}
        wait_for_slots(cluster, expected, timeout=90)
        cluster.wait_caught_up(timeout=60)
        statuses = [s for s in cluster.statuses().values() if s]
        assert not [s.get("db_log_mismatch") for s in statuses if s.get("db_log_mismatch")]
        with cluster.engine.connect() as conn:
            quarantined = conn.execute(
                sa.select(sa.func.count()).select_from(t.outbox_quarantine)
            ).scalar_one()
            rows = conn.execute(
                sa.select(ti.c.dag_id, ti.c.run_id, ti.c.task_id, ti.c.try_number, ti.c.lease_token)
                .where(ti.c.lease_token.is_not(None))
                .order_by(ti.c.dag_id, ti.c.run_id, ti.c.task_id, ti.c.try_number)
            ).all()
        assert quarantined == 0
        last: dict[tuple[str, str, str], int] = {}
        for row in rows:
            key = (row.dag_id, row.run_id, row.task_id)
            assert row.lease_token > last.get(key, 0), f"token reused for {key}: {row}"
            last[key] = row.lease_token
        cluster.assert_replicas_agree()
        time.sleep(0)
        dates = cluster.run_dates()["every_second"]
        print(
            f"\n[power loss {db_url.split(':')[0]}] commit indexes at the cut={commits};"
            f" journals cut back to their last fsync: {journals} ({cut} bytes dropped);"
            f" max token in DB at the cut={max_token}, restarted commit index="
            f"{status['commit_index']}; runs before={runs_before}; slots expected="
            f"{len(expected['every_second'])} runs={len(dates)}"
            f" duplicates={len(dates) - len(set(dates))}"
            f" missing={len(set(expected['every_second']) - set(dates))};"
            f" attempts with tokens={len(rows)}; quarantined={quarantined}"
        )
