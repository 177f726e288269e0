"""Dynamic task mapping on a real cluster: three ``raftsched scheduler`` nodes and a worker.

A task returns 1,000 bash commands; a ``BashTask.partial(...).expand(command=...)`` maps
over them (1,000 task instances ``run[0]`` .. ``run[999]``). Once a few hundred have run, the
leader is killed (kill -9) and later restarted; the run still succeeds, every instance ran
exactly once (each appended its item and ``$RAFTSCHED_MAP_INDEX`` to a file: 1,000 lines,
item i in instance i, none twice) and the DB holds exactly one attempt per instance, its
first, successful. A small mapped TaskFlow task hands its values downstream in map index
order, and ``tasks list`` shows the map indexes.

The lease TTL (10 s) outlives the failover, so no lease of a running instance expires while
the leader is down: a second attempt in the DB would be a real duplicate.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from api_harness import ADMIN, ApiCluster
from harness import wait_for

from raftsched.api.gen import common_pb2, dag_pb2

pytestmark = pytest.mark.slow

ITEMS = 1000

MAP_DAG = """
from raftsched import BashTask, dag, task

OUT = {out!r}
ITEMS = {items}


@dag(schedule=None, max_active_tasks=64)
def map_e2e():
    @task
    def commands() -> list:  # 1,000 short commands: about 30 KiB of XCom
        return [f"echo {{i}} $RAFTSCHED_MAP_INDEX >>$OUT" for i in range(ITEMS)]

    @task
    def double(x: int) -> int:
        return x * 2

    @task
    def total(values: list) -> list:
        return values

    BashTask.partial(task_id="run", env={{"OUT": OUT + "/ran"}}).expand(command=commands())
    total(double.expand(x=[3, 1, 2]))


map_e2e()
"""


def _attempts(engine: sa.Engine, run_id: str) -> list[tuple[str, int, str]]:
    with engine.connect() as conn:
        return [
            (r.task_id, r.try_number, r.state)
            for r in conn.execute(
                sa.text(
                    "SELECT task_id, try_number, state FROM task_instance"
                    " WHERE dag_id = 'map_e2e' AND run_id = :r"
                ),
                {"r": run_id},
            )
        ]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_thousand_mapped_instances_run_once_each_across_a_leader_kill(
    tmp_path: Path, db_url: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    dags = {"map_e2e.py": MAP_DAG.format(out=str(out), items=ITEMS)}
    with ApiCluster(tmp_path / "cluster", db_url, dags=dags, lease_ttl=10) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        client = cluster.client()
        cluster.wait_dags(client, {"map_e2e"}, timeout=60)
        cluster.start_worker("w1", concurrency=32)
        run_id = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="map_e2e")).run.run_id

        # mid-mapping: kill -9 the leader, bring it back once another leads
        wait_for(
            lambda: len(_lines(out / "ran")) >= 200,
            timeout=120,
            what="200 mapped instances ran",
            interval=0.1,
        )
        leader = cluster.wait_leader()
        cluster.kill(leader)
        assert len(_lines(out / "ran")) < ITEMS, "the kill came after the mapping: too late"
        cluster.wait_leader(exclude={leader}, timeout=60)
        cluster.start_node(leader)

        run = cluster.wait_run(client, "map_e2e", run_id, timeout=300)
        assert run.state == common_pb2.RUN_STATE_SUCCESS

        # each instance ran exactly once, with its own item
        ran = _lines(out / "ran")
        assert sorted(ran) == sorted(f"{i} {i}" for i in range(ITEMS)), ran[:20]

        # the cluster's view: 1,000 instances, the mapped task took their joint state
        current = cluster.current(client, "map_e2e", run_id)
        instances = {k: v for k, v in current.items() if k.startswith("run[")}
        assert len(instances) == ITEMS
        assert all(ti.state == common_pb2.TASK_STATE_SUCCESS for ti in instances.values())
        assert all(ti.try_number == 1 for ti in instances.values())
        assert {ti.map_index for ti in instances.values()} == set(range(ITEMS))
        assert current["run"].state == common_pb2.TASK_STATE_SUCCESS
        assert current["run"].map_count == ITEMS
        # downstream got the mapped values as one list, in map index order
        assert json.loads(current["total"].result_json) == [6, 2, 4]

        # the DB: one attempt per instance, its first, successful (none ran twice)
        def materialized() -> list[tuple[str, int, str]] | None:
            rows = [r for r in _attempts(cluster.engine, run_id) if r[0].startswith("run[")]
            done = sum(1 for r in rows if r[2] == "success")
            return rows if done == ITEMS else None

        rows = wait_for(materialized, timeout=60, what="the attempts in the DB", interval=0.5)
        assert len(rows) == ITEMS, sorted(r for r in rows if r[1] > 1)[:10]
        assert {r[1] for r in rows} == {1}

        # tasks list: the task's id and each instance's map index
        listing = subprocess.run(
            [
                sys.executable,
                "-m",
                "raftsched",
                "tasks",
                "list",
                "map_e2e",
                run_id,
                "--server",
                ",".join(cluster.api_addresses),
                "--token",
                ADMIN,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listing.returncode == 0, listing.stderr
        rows_out = [line.split() for line in listing.stdout.splitlines()]
        assert ["run", "999", "success"] in [r[:3] for r in rows_out]
        assert ["run", f"x{ITEMS}", "success"] in [r[:3] for r in rows_out]
