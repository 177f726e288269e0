"""The audit log end to end (3 real nodes, SQLite and PostgreSQL): actions by an operator token
named "ci" and by a web user acting through the webserver's admin token ("alice via web", the
metadata the pages' gateway sends) are recorded with the right actor; after the leader is
killed, `raftsched audit` (the CLI, through any node) and the metadata DB show every record
once, and the filters select by DAG and actor. Unnamed tokens are named by role and identity.
Every wait is bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from api_harness import ADMIN, OPERATOR, VIEWER, ApiCluster
from cryptography.fernet import Fernet
from harness import wait_for

from raftsched.api.auth import USER_METADATA, caller_scope_of
from raftsched.api.gen import cluster_pb2, dag_pb2, secret_pb2
from raftsched.cli.main import main
from raftsched.core.versions import RELEASE
from raftsched.errors import ApiError
from raftsched.store import tables as t

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

DAG = """\
from datetime import datetime

from raftsched import DAG, BashTask

with DAG("audited", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
    BashTask("a", command="true")

with DAG("other", schedule=None, start_date=datetime(2024, 1, 1)) as other:
    BashTask("b", command="true")
"""
WEB = ((USER_METADATA, "alice"),)


def _cli(cluster: ApiCluster, capsys: pytest.CaptureFixture[str], *args: str) -> list[dict]:
    base = ["--config", str(cluster.config_path), "--token", ADMIN, "--output", "json", "audit"]
    assert main([*base, *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_actors_survive_a_leader_kill(
    tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    names = f"ci={caller_scope_of(OPERATOR)},web={caller_scope_of(ADMIN)}"
    config = {
        "api": {"token_names": names},
        "secrets": {"fernet_key": Fernet.generate_key().decode()},
    }
    with ApiCluster(tmp_path, db_url, dags={"audited.py": DAG}, config=config) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        ci, web, viewer = cluster.client(OPERATOR), cluster.client(ADMIN), cluster.client(VIEWER)
        cluster.wait_dags(ci, {"audited", "other"})
        wait_for(  # actors enter commands once every node runs this release (core/audit.py)
            lambda: all(
                (s or {}).get("cluster_version") == RELEASE for s in cluster.statuses().values()
            ),
            timeout=30,
            what="the cluster version of this release",
        )
        run_id = ci.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="audited")).run.run_id
        ci.dags.PauseDag(dag_pb2.PauseDagRequest(dag_id="other"))
        web.dags.ClearTasks(
            dag_pb2.ClearTasksRequest(dag_id="audited", run_id=run_id, task_ids=["a"]),
            metadata=WEB,
        )
        web.secrets.SetSecret(
            secret_pb2.SetSecretRequest(kind="variable", key="REGION", value="eu-west-1"),
            metadata=WEB,
        )
        ci.dags.UnpauseDag(dag_pb2.UnpauseDagRequest(dag_id="other"), metadata=WEB)
        web.dags.PauseDag(dag_pb2.PauseDagRequest(dag_id="other"))  # no user: the token

        expected = [
            ("web", "pause", "other", ""),
            ("ci", "unpause", "other", ""),  # an operator cannot speak for anyone
            ("alice via web", "set_variable", "", ""),
            ("alice via web", "clear", "audited", run_id),
            ("ci", "pause", "other", ""),
            ("ci", "trigger", "audited", run_id),
        ]
        leader = cluster.wait_leader()
        cluster.kill(leader)
        cluster.wait_leader(timeout=60, exclude=[leader])
        records = _cli(cluster, capsys)
        assert [
            (r["actor"], r["action"], r["dag_id"] or "", r["run_id"] or "") for r in records
        ] == (expected)
        assert [r["id"] for r in records] == sorted((r["id"] for r in records), reverse=True)
        assert records[2]["detail"] == "REGION" and "eu-west-1" not in json.dumps(records)
        assert [r["action"] for r in _cli(cluster, capsys, "--actor", "alice")] == [
            "set_variable",
            "clear",
        ]
        assert [r["actor"] for r in _cli(cluster, capsys, "--dag", "audited")] == [
            "alice via web",
            "ci",
        ]
        assert [r["action"] for r in _cli(cluster, capsys, "--limit", "2")] == ["pause", "unpause"]
        # Every record reaches the DB once (the new leader materializes what the old one left)
        query = sa.select(t.audit_log.c.actor, t.audit_log.c.action).order_by(t.audit_log.c.id)

        def stored() -> list[tuple[str, str]] | None:
            with cluster.engine.connect() as conn:
                rows = [(row[0], row[1]) for row in conn.execute(query)]
            return rows if len(rows) >= len(expected) else None

        rows = wait_for(stored, timeout=30, what="the records in the DB")
        assert rows == [(a, b) for a, b, _, _ in reversed(expected)]
        # Only admins read it
        with pytest.raises(ApiError) as denied:
            viewer.cluster.ListAuditRecords(cluster_pb2.ListAuditRecordsRequest())
        assert denied.value.code.name == "PERMISSION_DENIED"
