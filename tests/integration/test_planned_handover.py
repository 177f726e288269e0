"""A planned restart of the leader hands over: SIGTERM makes the leader stop scheduling, pass
leadership to an up-to-date follower (one new term, no election timeout) and only then stop;
the restarted node rejoins without forcing an election. A 1-second DAG on a no-op worker keeps
running throughout, and the DB shows no slot whose run started more than one schedule interval
late (counted from the rows, never timed)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from api_harness import ApiCluster
from harness import every_second_dag, utcnow, wait_for, whole_second

from raftsched.store.tables import dag_run

pytestmark = pytest.mark.slow

DAG_ID = "handover_1s"
INTERVAL = timedelta(seconds=1)  # the DAG's schedule interval


def test_sigterm_on_the_leader_hands_over_and_no_slot_is_late(
    tmp_path: Path, sqlite_url: str
) -> None:
    start = whole_second(utcnow()) - timedelta(seconds=2)
    dags = {f"{DAG_ID}.py": every_second_dag(DAG_ID, start=start, catchup=True)}
    with ApiCluster(tmp_path, sqlite_url, dags=dags) as cluster:
        cluster.start()
        leader = cluster.wait_leader(timeout=60)
        client = cluster.client()
        cluster.wait_dags(client, {DAG_ID})
        survivors = [i for i in range(3) if i != leader]
        # The worker talks to the nodes that stay up: this test is about the scheduler's
        # handover, not about a worker moving its long poll off a stopping node.
        cluster.start_worker("noop", noop=True, concurrency=4, nodes=survivors)
        wait_for(lambda: len(_runs(cluster)) >= 3, timeout=60, what="runs started by the worker")
        cluster.wait_caught_up(timeout=60, outbox=False)
        # Steady state first: the slots before the DAG registered were caught up late, and the
        # worker's first poll came when its process was up; neither is measured.
        time.sleep(2.0)
        old = cluster.status(leader)
        assert old is not None
        term = int(old["term"])
        since = whole_second(utcnow())

        # -- SIGTERM the leader: it hands over, then exits 0 ---------------------------------
        assert cluster.stop_node(leader) == 0
        log = cluster.nodes[leader].log_path.read_text(errors="replace")
        assert "handed leadership over to" in log, cluster.nodes[leader].log_tail()
        new = cluster.wait_leader(timeout=30, exclude={leader})
        status = cluster.status(new)
        assert status is not None
        assert int(status["term"]) == term + 1, (term, cluster.brief())  # one term: no election

        # -- restart it: it rejoins as a follower without forcing an election -----------------
        cluster.start_node(leader)
        wait_for(lambda: cluster.status(leader), timeout=60, what="the restarted node")
        cluster.wait_caught_up(timeout=60, outbox=False)
        # Slots after the restart too, with the old leader back as a follower.
        time.sleep(max(2.0, (since + timedelta(seconds=7) - utcnow()).total_seconds()))
        until = whole_second(utcnow()) - timedelta(seconds=1)
        cluster.wait_caught_up(timeout=60)  # every run row is in the DB
        terms = {i: int((cluster.status(i) or {}).get("term") or 0) for i in range(3)}
        assert set(terms.values()) == {term + 1}, terms
        assert cluster.leader() == new

        # -- the DB: every slot has a run, none started more than one interval late -----------
        slots = [since + i * INTERVAL for i in range(int((until - since) / INTERVAL) + 1)]

        def all_started() -> dict[datetime, tuple[datetime, datetime]] | None:
            runs = _runs(cluster)
            done = {s: runs[s] for s in slots if s in runs}
            return done if len(done) == len(slots) else None

        runs = wait_for(all_started, timeout=30, what="a started run for every slot")
        # A run's created_at is the leader's CreateRuns, its start_date the first lease.
        late = {s: runs[s] for s in slots if max(runs[s]) - s > INTERVAL}
        assert not late, f"{len(late)} of {len(slots)} slots started late: {late}"
        cluster.assert_replicas_agree()


def _runs(cluster: ApiCluster) -> dict[datetime, tuple[datetime, datetime]]:
    """logical_date -> (created_at, start_date) of the DAG's runs that started."""
    with cluster.engine.connect() as conn:
        rows = conn.execute(
            sa.select(dag_run.c.logical_date, dag_run.c.created_at, dag_run.c.start_date).where(
                dag_run.c.dag_id == DAG_ID
            )
        ).all()
    return {
        _utc(r.logical_date): (_utc(r.created_at), _utc(r.start_date))
        for r in rows
        if r.created_at is not None and r.start_date is not None
    }


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
