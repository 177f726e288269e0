"""A worker killed with kill -9 while it holds a task (issue #11, docs/architecture.md §11).

Its task supervisor outlives it, kills every process of the attempt (a daemon the task forked
included), waits until none is left, and reports the attempt as failed with its fencing token.
So the task is retried on another worker without waiting for the lease TTL, which is set far
longer than any wait here (60 s): the retry can only have come from that report, and the
first attempt's message says so. From the DB rows: the first attempt ended before the second
began, and the task succeeded once. Three real nodes, SQLite; every wait is bounded.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from api_harness import ApiCluster
from harness import wait_for

from raftsched.api.gen import common_pb2, dag_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

S = common_pb2
LEASE_TTL = 60.0  # the TTL path cannot be what moves the task within this test's waits
HEARTBEAT = 1.0

DAG = """\
    from datetime import datetime, timedelta

    from raftsched import DAG, BashTask

    LOG = "@LOG@"
    COMMAND = (
        'if [ "$RAFTSCHED_TRY_NUMBER" = 1 ]; then '
        'sleep 1000 & echo "1 daemon $!" >> ' + LOG + '; '
        'echo "1 pid $$" >> ' + LOG + '; sleep 1000; fi; '
        'echo "$RAFTSCHED_TRY_NUMBER done" >> ' + LOG
    )

    with DAG("death", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        BashTask("long", command=COMMAND, retries=1, retry_delay=timedelta(0))
    """


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _pids(log: Path) -> dict[str, int]:
    found = {}
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "1" and parts[1] in ("pid", "daemon"):
            found[parts[1]] = int(parts[2])
    return found


def _rows(engine: sa.Engine, run_id: str) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT try_number, state, start_date, end_date, worker_id, message"
                    " FROM task_instance WHERE dag_id = 'death' AND run_id = :r"
                    " ORDER BY try_number"
                ),
                {"r": run_id},
            )
        )


def test_a_killed_workers_task_is_retried_elsewhere_without_overlap(
    tmp_path: Path, sqlite_url: str
) -> None:
    log = tmp_path / "task.log"
    log.touch()
    dags = {"death.py": textwrap.dedent(DAG).replace("@LOG@", str(log))}
    with ApiCluster(
        tmp_path, sqlite_url, dags=dags, lease_ttl=LEASE_TTL, heartbeat_interval=HEARTBEAT
    ) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {"death"})
        victim = cluster.start_worker("victim", concurrency=1)
        run_id = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="death")).run.run_id
        first = cluster.wait_task(
            client,
            "death",
            run_id,
            "long",
            lambda ti: ti.state == S.TASK_STATE_RUNNING and ti.worker_id == "victim",
        )
        pids = wait_for(
            lambda: p if len(p := _pids(log)) == 2 else None,
            timeout=30,
            what="the first attempt and its daemon",
        )
        assert all(_alive(p) for p in pids.values())

        victim.kill()  # SIGKILL: no shutdown, no release, no report of its own
        cluster.start_worker("rescuer", concurrency=1)
        done = cluster.wait_task(
            client, "death", run_id, "long", lambda ti: ti.state == S.TASK_STATE_SUCCESS, timeout=30
        )
        assert (done.worker_id, done.try_number) == ("rescuer", 2), done
        assert done.lease_token > first.lease_token
        # The whole first attempt is dead: the task and the daemon it left in the background.
        assert not any(_alive(p) for p in pids.values()), pids
        assert "1 done" not in log.read_text()

        rows = wait_for(
            lambda: r if len(r := _rows(cluster.engine, run_id)) == 2 and r[1].end_date else None,
            timeout=30,
            what="both attempts in the database",
        )
        one, two = rows
        assert (one.try_number, one.state, one.worker_id) == (1, "failed", "victim"), one
        assert "died while the attempt ran" in one.message, one.message
        assert (two.try_number, two.state, two.worker_id) == (2, "success", "rescuer"), two
        assert one.end_date is not None and two.start_date is not None
        assert one.end_date <= two.start_date, "the two attempts overlapped"
        assert sum(1 for r in rows if r.state == "success") == 1
