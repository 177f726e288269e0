"""A manual run triggered for a slot the scheduler has yet to reach.

The run finishes and, with no retention, would leave the replicated state long before the
scheduler gets to its slot. The scheduler must then find the slot taken, not create a second
run there: the DB is unique on (dag_id, logical_date) and would refuse it, which would stop
the materializer and, through back-pressure, the whole cluster.
"""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from api_harness import ApiCluster
from google.protobuf.timestamp_pb2 import Timestamp
from harness import wait_for

from raftsched.api.gen import dag_pb2

pytestmark = pytest.mark.slow

PERIOD = 5  # seconds between slots
DAG = textwrap.dedent(
    f"""\
    from datetime import datetime, timedelta, timezone

    from raftsched import DAG, BashTask

    with DAG(
        "ahead",
        schedule="* * * * * */{PERIOD}",
        start_date=datetime.now(timezone.utc) - timedelta(minutes=1),
        catchup=False,
    ) as dag:
        BashTask("a", command="true")
    """
)


def test_a_run_triggered_for_a_future_slot_keeps_that_slot(tmp_path: Path, db_url: str) -> None:
    config = {"scheduler": {"run_retention_sec": 0}}
    with ApiCluster(tmp_path, db_url, dags={"ahead.py": DAG}, config=config) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {"ahead"})
        cluster.start_worker("w1", noop=True)

        now = datetime.now(UTC).replace(microsecond=0)
        ahead = now + timedelta(seconds=3 * PERIOD - now.second % PERIOD)  # a slot, 11-15 s on
        when = Timestamp()
        when.FromDatetime(ahead)
        request = dag_pb2.TriggerDagRequest(dag_id="ahead", logical_date=when)
        run_id = client.dags.TriggerDag(request).run.run_id
        cluster.wait_run(client, "ahead", run_id)

        after = ahead + timedelta(seconds=2 * PERIOD)
        wait_for(
            lambda: after in cluster.run_dates().get("ahead", []),
            timeout=90,
            what=f"the scheduled run at {after:%H:%M:%S}, two slots past the manual one",
            describe=cluster.brief,
        )
        cluster.wait_caught_up(timeout=60)  # the materializer was never stuck
        at_slot = [rid for dag_id, date, rid in cluster.runs() if date == ahead]
        assert at_slot == [run_id]
        cluster.assert_replicas_agree()
