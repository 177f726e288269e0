"""One consistency model for every client (issue #15), on a real 3-node cluster whose third
node's replica lags on purpose (RAFTSCHED_TEST_APPLY_DELAY).

One client deploys DAG files, lists, triggers and reads back its runs, each call starting at
the next node in rotation (consistency_history.py). First with the client's index tracking
off: the lag shows up as anomalies (a read older than an earlier one, a run it created
missing, ...): the reproduction. Then with tracking on (the default): zero anomalies.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from api_harness import ADMIN, ApiCluster
from consistency_history import DAG_SOURCE, Workload
from harness import wait_for

from raftsched.api.client import SEEN_INDEX_ENV
from raftsched.api.gen import cluster_pb2, dag_pb2
from raftsched.cli.main import main
from raftsched.errors import ApiError
from tests.integration.node_hooks import APPLY_DELAY_ENV

pytestmark = pytest.mark.slow

LAG_SECONDS = 0.3
LAGGING_NODE = 2
FRESH_NODE = 0
BASELINE_SECONDS, BASELINE_ROUNDS = 12.0, 30
TRACKED_SECONDS, TRACKED_ROUNDS = 30.0, 60


def lagging_cluster(tmp_path: Path, db_url: str) -> ApiCluster:
    cluster = ApiCluster(tmp_path, db_url)
    node = cluster.nodes[LAGGING_NODE]
    node.env = {**node.env, APPLY_DELAY_ENV: str(LAG_SECONDS)}
    return cluster


def lead_elsewhere(cluster: ApiCluster) -> None:
    """The lagging node lags only while it follows: move the leadership away from it."""
    for _ in range(5):  # a transfer can lose its election on a loaded machine: it says retry
        if cluster.wait_leader() != LAGGING_NODE:
            return
        target = cluster.addresses[FRESH_NODE]
        request = cluster_pb2.TransferLeadershipRequest(target=target)
        with contextlib.suppress(ApiError):
            cluster.client().cluster.TransferLeadership(request)
    cluster.wait_leader(exclude={LAGGING_NODE})


def test_no_client_ever_reads_from_behind_what_it_has_seen(tmp_path: Path, db_url: str) -> None:
    with lagging_cluster(tmp_path, db_url) as cluster:
        cluster.start()
        lead_elsewhere(cluster)
        cluster.wait_all_up()

        untracked = cluster.client(track_index=False, deadline=10.0)
        baseline = Workload(cluster.dags_folder, untracked, prefix="untracked").run(
            BASELINE_SECONDS, BASELINE_ROUNDS
        )
        print(f"\nwithout index tracking: {baseline.summary()}")

        client = cluster.client(deadline=10.0)
        history = Workload(cluster.dags_folder, client, prefix="tracked").run(
            TRACKED_SECONDS, TRACKED_ROUNDS
        )
        print(f"with index tracking: {history.summary()}")

        assert baseline.anomalies, f"the lag produced no anomaly to prevent: {baseline.summary()}"
        assert len(history.ops) >= 40, history.summary()
        assert {op.node for op in history.ops if op.node} == set(cluster.addresses)
        assert not history.anomalies, history.summary()


def test_linearizable_reads_and_the_cli_across_invocations(
    tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two clients that share nothing: after A's trigger returns, B's linearizable read at
    the lagging node includes it (read-index round trip), with no index passed along. Then
    the issue's own steps with the CLI: a DAG listed by one command is shown and triggered by
    the next ones, through the lagging node."""
    with lagging_cluster(tmp_path, sqlite_url) as cluster:
        (cluster.dags_folder / "lin.py").write_text(
            "from datetime import datetime\nfrom raftsched import DAG, BashTask\n"
            'with DAG("lin", schedule=None, start_date=datetime(2024, 1, 1)):\n'
            '    BashTask("t", command="true")\n'
        )
        cluster.start()
        lead_elsewhere(cluster)
        writer = cluster.client()
        cluster.wait_dags(writer, {"lin"})
        reader = cluster.client(nodes=[LAGGING_NODE], track_index=False, consistency="linearizable")
        for _ in range(5):
            wrote = writer.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="lin"))
            read = reader.dags.ListRuns(dag_pb2.ListRunsRequest(dag_id="lin"))
            assert read.freshness.node_id == cluster.addresses[LAGGING_NODE]
            assert read.freshness.applied_index >= wrote.freshness.applied_index
            assert wrote.run.run_id in {r.run_id for r in read.runs}

        # The CLI, one process per command as a person types them: `dags list` through a node
        # that has the new DAG, then `dags show` and `dags trigger` through the lagging one.
        # The index the first command saw travels in the user's seen-index file.
        cli = CliUser(cluster, tmp_path / "seen-index", capsys)
        for n in range(3):
            dag_id = f"cli_{n}"
            source = DAG_SOURCE.format(dag_id=dag_id)
            (cluster.dags_folder / f"{dag_id}.py").write_text(source)
            wait_for(
                lambda dag_id=dag_id: dag_id in cli.listed(FRESH_NODE),
                timeout=30,
                what=f"{dag_id} listed",
                interval=0.1,
            )
            seen = int(cli.seen_file.read_text())
            shown = cli.json(LAGGING_NODE, "dags", "show", dag_id)
            assert shown["dag"]["dag_id"] == dag_id
            run = cli.json(LAGGING_NODE, "dags", "trigger", dag_id)["run"]
            assert run["run_id"].startswith("manual__")
            assert int(cli.seen_file.read_text()) > seen


class CliUser:
    """``raftsched`` commands in this process, one node each, sharing one seen-index file."""

    def __init__(self, cluster: ApiCluster, seen_file: Path, capsys: Any) -> None:
        self.cluster, self.seen_file, self.capsys = cluster, seen_file, capsys

    def json(self, node: int, *words: str) -> dict[str, Any]:
        argv = ["--config", str(self.cluster.config_path), *words]
        argv += ["--server", self.cluster.api_addresses[node], "--token", ADMIN]
        argv += ["--output", "json", "--timeout", "10"]
        self.capsys.readouterr()
        with mock.patch.dict(os.environ, {SEEN_INDEX_ENV: str(self.seen_file)}):
            code = main(argv)
        out, err = self.capsys.readouterr()
        assert code == 0, f"raftsched {' '.join(words)} through node {node}: {err}"
        return json.loads(out)

    def listed(self, node: int) -> set[str]:
        return {d["dag_id"] for d in self.json(node, "dags", "list")["dags"]}
