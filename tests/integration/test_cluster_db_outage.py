"""The metadata DB goes away for a while (a private PostgreSQL, stopped and started again).

While it is down the outbox grows to ``[scheduler] max_outbox`` and the leader reports
back-pressure; once it is back everything is written, once: every slot has exactly one run,
and back-pressure clears.
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

from scripts.partition.pgserver import PostgresServer, unavailable_reason

pytestmark = pytest.mark.slow

DAG_COUNT = 3
OUTAGE_SECONDS = 10.0
MAX_OUTBOX = 20


@pytest.fixture
def private_pg():  # type: ignore[no-untyped-def]
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"cannot run a private PostgreSQL: {reason}")
    with PostgresServer(durable=False) as pg:
        yield pg


def test_db_outage_backpressure_then_catch_up(tmp_path: Path, private_pg) -> None:  # type: ignore[no-untyped-def]
    db_url = private_pg.create_database("raftsched_outage")
    now = whole_second(utcnow())
    start, end = now - timedelta(seconds=3), now + timedelta(seconds=25)
    dags = second_dags(DAG_COUNT, start=start, end=end)
    expected = {f"every_second_{i}": second_slots(start, end) for i in range(DAG_COUNT)}
    config = {"scheduler": {"max_outbox": MAX_OUTBOX, "materialize_batch": 50}}

    with ClusterHarness(tmp_path, db_url, dags=dags, config=config) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        wait_for(
            lambda: len(cluster.runs()) >= DAG_COUNT * 3,
            timeout=60,
            what="first runs",
            describe=cluster.brief,
        )

        private_pg.stop()
        outage_began = time.monotonic()

        def leader_status() -> dict | None:  # type: ignore[type-arg]
            leader = cluster.leader()
            return cluster.status(leader) if leader is not None else None

        def backpressure_now() -> bool:
            status = leader_status()
            return bool(status and status.get("backpressure"))

        # The flag is recomputed on the leader's next tick: wait for it with a full outbox.
        onset = wait_for(
            lambda: (
                (s := leader_status())
                and s.get("backpressure")
                and s.get("outbox_size", 0) >= MAX_OUTBOX
                and s
            ),
            timeout=OUTAGE_SECONDS + 20,
            what="the leader to report back-pressure while the DB is down",
            describe=cluster.brief,
        )
        time.sleep(max(2.0, OUTAGE_SECONDS - (time.monotonic() - outage_began)))
        late = leader_status()
        private_pg.start()
        # Back-pressure holds the outbox: it does not keep growing by a run per DAG per second.
        assert late is not None and late["backpressure"], cluster.brief()
        assert late["outbox_size"] <= onset["outbox_size"] + 2 * DAG_COUNT, (onset, late)

        wait_for_slots(cluster, expected, timeout=120)
        cluster.wait_caught_up(timeout=60)
        wait_for(
            lambda: not backpressure_now() and cluster.leader() is not None,
            timeout=30,
            what="back-pressure to clear",
            describe=cluster.brief,
        )
        cluster.assert_replicas_agree()
