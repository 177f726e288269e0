"""The leader loop on a real in-process 3-node cluster: a 1-second cron DAG gets its runs
created, materialized into SQLite (watermark advancing) and acked (outbox shrinking)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from test_cluster_support import cluster_settings, wait_for

from raftsched.cluster.leader import LoopSettings
from raftsched.cluster.runtime import MigratingSink, NodeRuntime
from raftsched.store import tables as t
from raftsched.store.engine import create_engine_for
from raftsched.store.heartbeats import list_heartbeats, record_heartbeat
from raftsched.store.materializer import Materializer
from raftsched.store.migrate import init_db


def dag_source(dag_id: str, start: datetime, end: datetime) -> str:
    return textwrap.dedent(
        f"""\
        from datetime import datetime

        from raftsched import DAG, BashTask

        with DAG(
            {dag_id!r},
            schedule="* * * * * *",
            start_date=datetime.fromisoformat({start.isoformat()!r}),
            end_date=datetime.fromisoformat({end.isoformat()!r}),
            catchup=True,
            max_active_runs=1000,
        ):
            BashTask("noop", command="true")
        """
    )


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = create_engine_for(f"sqlite:///{tmp_path / 'db' / 'raftsched.db'}")
    init_db(engine)
    yield engine
    engine.dispose()


def leader_of(runtimes: list[NodeRuntime]) -> NodeRuntime | None:
    leaders = [rt for rt in runtimes if rt.node is not None and rt.node.is_leader]
    return leaders[0] if len(leaders) == 1 and leaders[0].node.quorum else None  # type: ignore[union-attr]


def test_leader_creates_and_materializes_second_runs(tmp_path: Path, engine: sa.Engine) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    start, end = now - timedelta(seconds=3), now + timedelta(seconds=3)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "every_second.py").write_text(dag_source("every_second", start, end))
    loop_settings = LoopSettings(
        dags_folder=dags,
        dag_file_timeout=30,
        min_file_process_interval=30,
        scheduler_heartbeat_sec=0.5,
        max_outbox=10000,
        max_runs_per_tick=100,
    )
    runtimes = [
        NodeRuntime(
            settings,
            loop_settings,
            MigratingSink(Materializer(engine), engine),
            materialize_batch=50,
            heartbeat_write=lambda beat: record_heartbeat(engine, beat),
            admin=False,
        )
        for settings in cluster_settings(tmp_path / "data")
    ]
    try:
        for runtime in runtimes:
            runtime.start()
        leader = wait_for(lambda: leader_of(runtimes), timeout=30, what="a leader")
        expected = {start + timedelta(seconds=i) for i in range(7)}

        def runs_in_db() -> list[tuple[str, datetime]]:
            with engine.connect() as conn:
                rows = conn.execute(sa.select(t.dag_run.c.dag_id, t.dag_run.c.logical_date))
                return [(r.dag_id, r.logical_date) for r in rows]

        wait_for(
            lambda: {d for _, d in runs_in_db()} >= expected,
            timeout=60,
            what=f"runs for every slot in the DB, got {runs_in_db()}",
        )
        rows = runs_in_db()
        assert len(rows) == len(set(rows)) == len(expected), rows  # one run per slot

        def settled() -> dict | None:
            status = leader.status()
            done = (
                status["outbox_size"] == 0
                and status["db_watermark"] == status["outbox_last_seq"]
                and status["outbox_acked_seq"] == status["outbox_last_seq"]
            )
            return status if done else None

        status = wait_for(settled, timeout=30, what="the outbox acked and empty")
        assert status["outbox_last_seq"] > 0
        assert status["role"] == "leader" and status["has_quorum"]
        assert status["became_leader_at"] is not None and status["first_commit_at"] is not None
        assert status["backpressure"] is False
        with engine.connect() as conn:
            watermark = conn.execute(sa.select(t.materialize_watermark.c.seq)).scalar_one()
        assert watermark == status["outbox_last_seq"]

        # Every replica reaches the leader's digest index with the same digest.
        target = leader.node.digest()  # type: ignore[union-attr]
        for runtime in runtimes:
            node = runtime.node
            assert node is not None
            got = wait_for(
                lambda node=node: node.digest() if node.digest()[0] >= target[0] else None,
                timeout=20,
                what="every node at the leader's digest index",
            )
            if got[0] == target[0]:
                assert got == target
            follower_status = runtime.status()
            assert follower_status["leader"] == leader.settings.self_address

        # Runs created once the cluster version is 3 name this leader's term (core/run_terms)
        record = leader.node.read(lambda state: state.dags["every_second"])  # type: ignore[union-attr]
        mine = (leader.node.term, leader.settings.self_address)  # type: ignore[union-attr]
        assert all((t.term, t.leader) == mine for t in record.terms), record.terms

        # Heartbeats land in the DB, one row per node.
        wait_for(lambda: len(list_heartbeats(engine)) == 3, timeout=20, what="3 heartbeat rows")
    finally:
        for runtime in runtimes:
            runtime.stop()
