"""`raftsched debug replay`: a node's data dir, copied, replays to the digest it recorded.

A real 3-node cluster (SQLite: the replay reads no DB) with a real worker runs a mixed
workload: a catch-up DAG with a 1-second schedule that ends a few seconds in (its runs
succeed), and a manually triggered DAG whose task fails. Once every run has finished and the
DB has caught up, a follower is stopped (SIGTERM: it records its digest in ``raft.digest`` as
it closes) and its directory copied after it stopped; once with no compaction (the whole log
is in the journal), once with compaction every few entries (a snapshot, then the journal
after it). ``raftsched debug replay`` on the copy, as a subprocess, must reproduce the
recorded digest and list the same runs as the DB's dag_run table. A copy with a tampered
digest stamp must fail the check (exit 1), and one with a journal of another format must be
refused with a message saying so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from api_harness import ApiCluster
from harness import child_env, every_second_dag, utcnow, wait_for
from harness import whole_second as whole

from raftsched.api.gen import dag_pb2
from raftsched.store.tables import dag_run

pytestmark = pytest.mark.slow

FAILING = textwrap.dedent(
    """\
    from raftsched import DAG, BashTask

    with DAG("failing", schedule=None, catchup=False) as dag:
        BashTask("boom", command="exit 3", retries=0)
    """
)


def _all_finished(cluster: ApiCluster) -> bool:
    with cluster.engine.connect() as conn:
        states = conn.execute(sa.select(dag_run.c.state)).scalars().all()
    return bool(states) and set(states) <= {"success", "failed"}


def _replay(node_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "raftsched", "debug", "replay", str(node_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("compaction", [False, True], ids=["journal", "snapshot"])
def test_replay_of_a_copied_data_dir_matches_digest_and_runs(
    tmp_path: Path, sqlite_url: str, compaction: bool
) -> None:
    now = whole(utcnow())
    start, end = now - timedelta(seconds=3), now + timedelta(seconds=6)
    dags = {
        "every_second.py": every_second_dag("every_second", start=start, end=end),
        "failing.py": FAILING,
    }
    # Compaction every few entries: the copy holds a snapshot, and the replay starts from it.
    config = {"cluster": {"compaction_min_entries": 10 if compaction else 100000}}
    with ApiCluster(tmp_path / "cluster", sqlite_url, dags=dags, config=config) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        client = cluster.client()
        cluster.wait_dags(client, {"every_second", "failing"})
        cluster.start_worker("w1", concurrency=4)
        client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="failing"))
        wait_for(
            lambda: (
                utcnow() > end + timedelta(seconds=2)
                and sum(r[0] == "every_second" for r in cluster.runs()) >= 5
                and _all_finished(cluster)
            ),
            timeout=90,
            what="every slot's run, finished",
            describe=cluster.brief,
        )
        cluster.wait_caught_up(timeout=60)
        leader = cluster.wait_leader()
        follower = next(i for i in range(3) if i != leader)
        db_runs = {(dag_id, run_id) for dag_id, _date, run_id in cluster.runs()}
        cluster.stop_node(follower)  # SIGTERM: the node writes raft.digest as it closes
        node_dir = cluster.data_dir / f"127.0.0.1_{cluster.addresses[follower].rpartition(':')[2]}"
        copy = tmp_path / "shipped"
        shutil.copytree(node_dir, copy)

    report = _json(_replay(copy, "-o", "json"))
    digest = report["digest"]
    assert digest["matches"] is True, digest
    if compaction:
        assert 0 < report["snapshot_index"] <= digest["recorded_index"], report["snapshot_index"]
    else:
        assert report["snapshot_index"] == 0 < digest["recorded_index"]
    assert {(r["dag_id"], r["run_id"]) for r in report["runs"]} == db_runs
    assert {"every_second", "failing"} <= {r[0] for r in db_runs}
    kinds = {d["command"] for d in report["decisions"]}
    changes = [c for d in report["decisions"] for c in d["changes"]]
    assert any(d["at"] for d in report["decisions"]), report["decisions"]  # some after it
    if not compaction:  # every decision is in the journal
        assert {"RegisterDags", "CreateRuns", "LeaseTasks", "CompleteAttempt"} <= kinds, kinds
        assert any(c.startswith("lease ") and " token " in c for c in changes), changes
        assert any(c.startswith("lease failing/") for c in changes), changes
        assert any(c.startswith("outcome failed") for c in changes), changes
        assert any(c.startswith("outcome success") for c in changes), changes

    # The filters only choose what is printed; the text form says the digest matched.
    seen = [dag for d in report["decisions"] for dag in d["dag_ids"]]
    dag = seen[0] if seen else "every_second"  # (after a late snapshot, maybe none)
    only = _replay(copy, "--dag", dag)
    assert only.returncode == 0, only.stderr
    lines = [line for line in only.stdout.splitlines() if not line.startswith("--")]
    assert len(lines) == sum(dag in d["dag_ids"] for d in report["decisions"]), only.stdout
    assert all(dag in line for line in lines), only.stdout
    assert "digest matches" in only.stdout
    first = min(d["index"] for d in report["decisions"] if d["at"])
    window = _json(_replay(copy, "-o", "json", "--from", str(first), "--to", str(first)))
    assert window["decisions"] and {d["index"] for d in window["decisions"]} == {first}
    assert window["digest"] == report["digest"]  # the whole log is applied all the same

    # It can fail: a digest stamp that is not the state's.
    stamp = json.loads((copy / "raft.digest").read_text())
    stamp["digest"] = "0" * len(stamp["digest"])
    (copy / "raft.digest").write_text(json.dumps(stamp))
    differs = _replay(copy)
    assert differs.returncode == 1, differs.stdout + differs.stderr
    assert "DIGEST DIFFERS" in differs.stdout

    # A journal of another format is refused, saying so.
    journal = copy / "raft.journal"
    journal.write_bytes(b"RAFTSCHED-JOURNAL-9\n" + journal.read_bytes()[20:])
    refused = _replay(copy)
    assert refused.returncode == 1
    assert "not a journal of this format" in refused.stderr, refused.stderr
