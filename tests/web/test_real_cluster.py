"""The webserver against a real 3-node cluster with a real worker (not canned data)."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest
from web_support import csrf_token, make_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from api_harness import ADMIN, ApiCluster

from raftsched.api.auth import caller_scope_of
from raftsched.api.gen import cluster_pb2, user_pb2
from raftsched.core.versions import RELEASE

pytestmark = pytest.mark.slow

DAG_FILE = textwrap.dedent(
    """\
    from datetime import datetime

    from raftsched import DAG, BashTask

    with DAG("web_e2e", schedule=None, start_date=datetime(2024, 1, 1), tags=["web"]) as dag:
        hello = BashTask("hello", command="echo hello-from-$RAFTSCHED_TRY_NUMBER")
        bye = BashTask("bye", command="echo bye; echo to-stderr >&2")
        hello >> bye
    """
)


def _wait(check, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_web_against_a_real_cluster(tmp_path: Path, sqlite_url: str) -> None:
    with ApiCluster(tmp_path, sqlite_url, dags={"web_e2e.py": DAG_FILE}) as cluster:
        cluster.start()
        cluster.wait_leader()
        api = cluster.client()
        cluster.wait_dags(api, {"web_e2e"})
        request = user_pb2.CreateUserRequest(
            username="ops", password="ops-password", role="operator"
        )
        api.users.CreateUser(request)
        cluster.start_worker("w1")
        _wait(  # the audit log records actors once the upgrade is finished (core/audit.py)
            lambda: all(
                (st or {}).get("cluster_version") == RELEASE for st in cluster.statuses().values()
            ),
            30,
            "the cluster version of this release",
        )
        app = make_app(cluster.api_addresses, RAFTSCHED_TOKEN=ADMIN, RAFTSCHED_DEADLINE=10.0)
        client = app.test_client()
        try:
            bad = client.post(
                "/login",
                data={"username": "ops", "password": "wrong", "csrf_token": csrf_token(client)},
            )
            assert bad.status_code == 401
            token = csrf_token(client)
            data = {"username": "ops", "password": "ops-password", "csrf_token": token}
            assert client.post("/login", data=data).status_code == 302

            assert b"web_e2e" in client.get("/dags?search=web_e2e").data
            page = client.get("/dags/web_e2e").get_data(as_text=True)
            assert 'data-task="hello"' in page and 'class="edge"' in page
            assert client.get("/dags/nope").status_code == 404

            token = csrf_token(client, "/dags/web_e2e/trigger")
            bad_conf = client.post("/dags/web_e2e/trigger", data={"conf": "[", "csrf_token": token})
            assert bad_conf.status_code == 400
            triggered = client.post(
                "/dags/web_e2e/trigger", data={"conf": '{"n": 1}', "csrf_token": token}
            )
            assert triggered.status_code == 302, triggered.get_data(as_text=True)
            run_url = triggered.headers["Location"]
            run_id = run_url.rsplit("/", 1)[1]

            def finished() -> dict | None:
                state = client.get(f"{run_url}/state.json").json
                return state if state["run"]["state"] in ("success", "failed") else None

            state = _wait(finished, 90, f"run {run_id} to finish")
            assert state["run"]["state"] == "success", state
            log = client.get(f"{run_url}/tasks/bye/log.json").json
            text = "".join(c["text"] for c in log["chunks"])
            assert "bye" in text and "to-stderr" in text and log["done"] is True
            assert {c["stream"] for c in log["chunks"]} >= {"stdout", "stderr"}

            grid = client.get("/dags/web_e2e/grid.json").json
            assert grid["latest"] == {"hello": "success", "bye": "success"}

            cluster_page = client.get("/cluster.json").json
            assert len(cluster_page["nodes"]) == 3 and cluster_page["leader"]
            health = client.get("/health")
            assert health.status_code == 200 and len(health.json["servers"]) == 3
            assert client.get("/import-errors").status_code == 200
            assert client.get("/users").status_code == 403  # operator
            # The audit log names the user who clicked, through the webserver's token
            query = cluster_pb2.ListAuditRecordsRequest(dag_id="web_e2e")
            records = api.cluster.ListAuditRecords(query).records
            web = f"admin token {caller_scope_of(ADMIN)}"
            assert [(r.actor, r.action, r.run_id) for r in records] == [
                (f"ops via {web}", "trigger", run_id)
            ]
            assert client.get("/audit").status_code == 403  # operator
        finally:
            app.extensions["raftsched_gateway"].close()
