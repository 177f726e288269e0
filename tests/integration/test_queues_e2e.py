"""Task queues end to end, on SQLite and on PostgreSQL: three real scheduler nodes and real
``raftsched worker --queues`` processes (one cluster per backend, shared by the module).

A DAG whose default_args put its tasks on queue "io", one task back on "default" and one on
"gpu". A worker serving "default" and one serving "io" each run exactly the task of their
queue (the attempt's worker id says which, live and in the DB rows); the "gpu" task stays
QUEUED, never leased, and `raftsched tasks list` and its task page in the web say that no live
worker serves queue 'gpu'; a worker for "gpu" starts and runs it, and the run succeeds.

The same cluster runs a DAG whose six one-second tasks share a pool of 2 slots (set with
`raftsched pools set`), between two empty tasks the scheduler finishes itself, and one task of
a pool nobody created: never more than 2 of the six run at once, though the leader is killed
-9 while they run (sampled live, and proved on the DB's attempt rows), the empty tasks never
reach a worker, the task of the unknown pool waits with that said, until the REST API
creates its pool (docs/architecture.md §19).

The same cluster serves the admin pages for variables and connections (a webserver in this
process): an admin sets a variable there, and neither that answer, nor any page after it, nor
any process's log holds the value (tests/web/test_secret_pages.py covers roles and CSRF).

And a worker's own ``GET /metrics`` ([worker] metrics_port), scraped while it runs a task of
queue "metered" and after: slots, the attempt running, lease renewals, its task supervisor up,
the attempt counted by outcome.
"""

from __future__ import annotations

import html
import io
import json
import re
import secrets
import socket
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from api_harness import ADMIN, OPERATOR, ApiCluster
from api_harness import VIEWER as VIEWER_TOKEN
from cryptography.fernet import Fernet
from harness import wait_for
from test_rest_api import _database

from raftsched.api.gen import common_pb2, dag_pb2, secret_pb2, user_pb2
from raftsched.cli.main import main as cli
from raftsched.store import queries

pytestmark = pytest.mark.slow

DAG_SOURCE = """
from raftsched import DAG, BashTask

with DAG("queues_dag", schedule=None, default_args={"queue": "io"}):
    BashTask("io_task", command="echo on io")
    BashTask("plain", command="echo on default", queue="default")
    BashTask("gpu_task", command="echo on gpu", queue="gpu")
"""
GATES = Path(tempfile.gettempdir()) / f"raftsched-metrics-gates-{secrets.token_hex(6)}"
METERED_SOURCE = f"""
from raftsched import DAG, BashTask

with DAG("metered_dag", schedule=None):
    BashTask(
        "held",
        command="for i in $(seq 600); do [ -e {GATES}/{{{{ run_id }}}} ] && exit 0; sleep 0.1;"
        " done; exit 1",
        queue="metered",
    )
"""
POOLS_SOURCE = """
from raftsched import DAG, BashTask, EmptyTask

with DAG("pools_dag", schedule=None, default_args={"queue": "pooled"}):
    work = [BashTask(f"w{i}", command="sleep 1", pool="two") for i in range(6)]
    EmptyTask("start") >> work >> EmptyTask("end")
    BashTask("elsewhere", command="true", pool="nope")
"""
RUN_ID = "q1"
UNSERVED = "no live worker serves queue 'gpu'"
VIEWER, VIEWER_PASSWORD = "queue-viewer", "queue-viewer-pass"
ADMIN_USER, ADMIN_PASSWORD = "queue-admin", "queue-admin-pass"
VALUE = f"val-{secrets.token_hex(8)}"


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiCluster]:
    workdir: Path = tmp_path_factory.mktemp(f"queues-{request.param}")
    with (
        _database(request.param, workdir) as url,
        ApiCluster(
            workdir / "cluster",
            url,
            dags={"queues.py": DAG_SOURCE, "metered.py": METERED_SOURCE, "pools.py": POOLS_SOURCE},
            config={"secrets": {"fernet_key": Fernet.generate_key().decode()}},
        ) as harness,
    ):
        harness.start()
        harness.wait_leader()
        client = harness.client()
        harness.wait_dags(client, {"queues_dag", "metered_dag"})
        for name, password, role in (
            (VIEWER, VIEWER_PASSWORD, "viewer"),
            (ADMIN_USER, ADMIN_PASSWORD, "admin"),
        ):
            request = user_pb2.CreateUserRequest(username=name, password=password, role=role)
            client.users.CreateUser(request)
        yield harness


def _tis(cluster: ApiCluster, client: Any) -> dict[str, Any]:
    return cluster.current(client, "queues_dag", RUN_ID)


_CSRF = re.compile(r'name="csrf-token" content="([^"]+)"')


@contextmanager
def _web(cluster: ApiCluster, username: str, password: str) -> Iterator[Any]:
    """A webserver's test client (in this process, on the cluster), logged in."""
    from raftsched.web import create_app

    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": "queues-e2e-secret",
            "RAFTSCHED_SERVERS": cluster.api_addresses,
            "RAFTSCHED_TOKEN": ADMIN,
            "RAFTSCHED_USER_RECHECK_SECONDS": 0.0,
        }
    )
    try:
        web = app.test_client()
        form = {"username": username, "password": password, "csrf_token": _token(web, "/login")}
        assert web.post("/login", data=form).status_code == 302
        yield web
    finally:
        app.extensions["raftsched_gateway"].close()


def _token(web: Any, path: str) -> str:
    found = _CSRF.search(web.get(path).get_data(as_text=True))
    assert found is not None, path
    return found.group(1)


def _task_page(cluster: ApiCluster) -> str:
    """The gpu task's page, as a viewer sees it through a webserver."""
    with _web(cluster, VIEWER, VIEWER_PASSWORD) as web:
        page = web.get(f"/dags/queues_dag/runs/{RUN_ID}/tasks/gpu_task")
        assert page.status_code == 200
        return html.unescape(page.get_data(as_text=True))


def test_each_task_runs_on_a_worker_of_its_queue(cluster: ApiCluster) -> None:
    client = cluster.client()
    cluster.start_worker("w-default", queues="default")
    cluster.start_worker("w-io", queues="io")
    client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="queues_dag", run_id=RUN_ID))
    success = common_pb2.TASK_STATE_SUCCESS
    for task_id in ("plain", "io_task"):
        cluster.wait_task(client, "queues_dag", RUN_ID, task_id, lambda ti: ti.state == success)
    tis = _tis(cluster, client)
    assert (tis["plain"].worker_id, tis["plain"].queue) == ("w-default", "default")
    assert (tis["io_task"].worker_id, tis["io_task"].queue) == ("w-io", "io")

    # nobody serves "gpu": its task waits, never leased, and says why
    gpu = cluster.wait_task(
        client,
        "queues_dag",
        RUN_ID,
        "gpu_task",
        lambda ti: ti.state == common_pb2.TASK_STATE_QUEUED and ti.waiting == UNSERVED,
        timeout=30,
        what="the gpu task's waiting note",
    )
    assert (gpu.try_number, gpu.worker_id, gpu.queue) == (0, "", "gpu")
    with redirect_stdout(io.StringIO()) as out:
        argv = ["--config", str(cluster.config_path), "--token", ADMIN]
        assert cli([*argv, "tasks", "list", "queues_dag", RUN_ID]) == 0
    listing = out.getvalue()
    assert "QUEUE" in listing.splitlines()[1]
    assert f"note: gpu_task is waiting: {UNSERVED}" in listing
    page = _task_page(cluster)
    assert f"waiting: {UNSERVED}" in page and "<dd>gpu</dd>" in page

    # a worker for "gpu" comes: it runs the task, and the run is done
    cluster.start_worker("w-gpu", queues="gpu,spare")
    done = cluster.wait_task(client, "queues_dag", RUN_ID, "gpu_task", lambda t: t.state == success)
    assert (done.worker_id, done.try_number, done.waiting) == ("w-gpu", 1, "")
    assert cluster.wait_run(client, "queues_dag", RUN_ID).state == common_pb2.RUN_STATE_SUCCESS

    # the DB keeps each attempt with the worker of its queue
    cluster.wait_caught_up(timeout=60)
    rows = queries.list_task_instances(cluster.engine, "queues_dag", RUN_ID)
    ran = {(r.task_id, r.try_number): r.worker_id for r in rows if r.state == "success"}
    assert ran == {("plain", 1): "w-default", ("io_task", 1): "w-io", ("gpu_task", 1): "w-gpu"}


def test_the_variables_page_never_shows_a_value(cluster: ApiCluster) -> None:
    with _web(cluster, ADMIN_USER, ADMIN_PASSWORD) as web:
        form = {"key": "QUEUE_TOKEN", "value": VALUE, "description": "for the gpu box"}
        saved = web.post("/variables", data={**form, "csrf_token": _token(web, "/variables")})
        assert saved.status_code == 302, saved.get_data(as_text=True)[:500]
        pages = [web.get(path) for path in ("/variables", "/connections", "/dags", "/metrics")]
        texts = [saved.get_data(as_text=True)] + [p.get_data(as_text=True) for p in pages]
        assert all(VALUE not in text for text in texts)
        assert "QUEUE_TOKEN" in texts[1] and "for the gpu box" in texts[1]
    answer = cluster.client().secrets.GetSecret(
        secret_pb2.GetSecretRequest(kind="variable", key="QUEUE_TOKEN", reveal=True)
    )
    assert answer.value == VALUE  # it was stored, encrypted, by the cluster
    for log in cluster.log_dir.glob("*.log"):  # every node's and worker's log
        assert VALUE not in log.read_text(errors="replace"), log


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    pairs = (line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("raftsched_"))
    return {name: float(value) for name, value in pairs}


def test_a_worker_serves_its_metrics_while_it_runs_a_task(cluster: ApiCluster) -> None:
    client = cluster.client()
    with socket.socket() as probe:  # a free port (the harness turns the default 7401 off)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"RAFTSCHED__WORKER__METRICS_PORT": str(port)}
    cluster.start_worker("w-metered", queues="metered", concurrency=3, extra_env=env)
    run_id = f"m-{secrets.token_hex(4)}"
    client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="metered_dag", run_id=run_id))
    running = common_pb2.TASK_STATE_RUNNING
    cluster.wait_task(client, "metered_dag", run_id, "held", lambda ti: ti.state == running)

    def renewed() -> dict[str, float] | None:
        m = _scrape(port)
        return m if m["raftsched_worker_lease_renewals_total"] >= 2 else None

    live = wait_for(renewed, timeout=30, what="two lease renewals in the worker's metrics")
    assert live["raftsched_worker_slots"] == 3
    assert live["raftsched_worker_slots_used"] == 1
    assert live["raftsched_worker_attempts_running"] == 1
    assert live["raftsched_worker_attempts_started_total"] == 1
    assert live["raftsched_worker_supervisor_up"] == 1
    assert live['raftsched_worker_lease_renewal_failures_total{reason="refused"}'] == 0

    GATES.mkdir(exist_ok=True)
    (GATES / run_id).touch()
    try:
        run = cluster.wait_run(client, "metered_dag", run_id)
    finally:
        (GATES / run_id).unlink()
    assert run.state == common_pb2.RUN_STATE_SUCCESS

    def counted() -> dict[str, float] | None:
        m = _scrape(port)
        return m if m['raftsched_worker_attempts_finished_total{outcome="success"}'] else None

    done = wait_for(counted, timeout=30, what="the attempt counted as a success")
    assert done["raftsched_worker_slots_used"] == 0
    assert done["raftsched_worker_attempts_running"] == 0
    assert done['raftsched_worker_attempts_finished_total{outcome="failed"}'] == 0
    assert done["raftsched_worker_supervisor_restarts_total"] == 0


def _cli(cluster: ApiCluster, *argv: str, token: str = ADMIN) -> str:
    with redirect_stdout(io.StringIO()) as out:
        assert cli(["--config", str(cluster.config_path), "--token", token, *argv]) == 0
    return out.getvalue()


def test_a_pool_of_two_never_runs_more_than_two_and_empty_tasks_need_no_worker(
    cluster: ApiCluster,
) -> None:
    from raftsched.api.gen import pool_pb2

    client = cluster.client()
    cluster.wait_dags(client, {"pools_dag"}, timeout=60)  # once the cluster runs release 3
    said = _cli(cluster, "pools", "set", "two", "2", "--description", "e2e", token=OPERATOR)
    assert "pool 'two' set: 2 slot(s)" in said
    cluster.start_worker("w-pooled", queues="pooled", concurrency=6)
    client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="pools_dag", run_id="p1"))
    running = common_pb2.TASK_STATE_RUNNING
    most, killed = 0, None
    for _ in range(300):  # at most ~60 s: six 1 s tasks, two at a time
        tis = cluster.current(client, "pools_dag", "p1")
        if killed is None and any(ti.state == running for ti in tis.values()):
            killed = cluster.leader()  # kill -9 the leader while the pool is in use
            assert killed is not None
            cluster.kill(killed)
            cluster.wait_leader(exclude=[killed])
            cluster.start_node(killed)
            continue
        pools = {p.name: p for p in client.pools.ListPools(pool_pb2.ListPoolsRequest()).pools}
        now = sum(1 for t, ti in tis.items() if t.startswith("w") and ti.state == running)
        assert now <= 2 and pools["two"].running_slots <= 2, (now, pools["two"])
        most = max(most, now)
        done = [t for t, ti in tis.items() if t.startswith("w")]
        if len(done) == 6 and all(tis[t].state == common_pb2.TASK_STATE_SUCCESS for t in done):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the pooled tasks did not finish: {tis}")
    assert most >= 1 and killed is not None
    # the task of a pool nobody created waits, and says why
    waiting = cluster.current(client, "pools_dag", "p1")["elsewhere"]
    assert waiting.state == common_pb2.TASK_STATE_QUEUED and waiting.try_number == 0
    assert "pool 'nope' does not exist" in waiting.waiting
    listing = _cli(cluster, "pools", "list", token=VIEWER_TOKEN)
    assert "default_pool" in listing and "unlimited" in listing and "e2e" in listing

    with _web(cluster, VIEWER, VIEWER_PASSWORD) as web:
        viewer = {"Authorization": f"Bearer {VIEWER_TOKEN}"}
        operator = {"Authorization": f"Bearer {OPERATOR}"}
        got = web.get("/api/v1/pools", headers=viewer).get_json()
        by_name = {p["name"]: p for p in got["pools"]}
        assert by_name["two"]["slots"] == 2 and by_name["default_pool"]["slots"] is None
        assert (by_name["nope"]["slots"], by_name["nope"]["queued_tasks"]) == (0, 1)
        denied = web.put("/api/v1/pools/nope", json={"slots": 1}, headers=viewer)
        assert denied.status_code == 403
        assert web.put("/api/v1/pools/nope", json={"slots": 1}, headers=operator).status_code == 200
        page = web.get("/pools").get_data(as_text=True)
        assert 'data-pool="two"' in page and 'data-pool="nope"' in page
        # each task's pool on the DAG page and in the REST API's DAG
        page = web.get("/dags/pools_dag").get_data(as_text=True)
        assert '<a href="/pools">two</a>' in page and '<a href="/pools">nope</a>' in page
        dag = web.get("/api/v1/dags/pools_dag", headers=viewer).get_json()
        pools_of = {t["task_id"]: (t["pool"], t["pool_slots"]) for t in dag["tasks"]}
        assert pools_of["w0"] == ("two", 1) and pools_of["elsewhere"] == ("nope", 1)
        assert pools_of["start"] == ("default_pool", 1)
    shown = _cli(cluster, "dags", "show", "pools_dag", "--output", "json", token=VIEWER_TOKEN)
    tasks = {t["task_id"]: t for t in json.loads(shown)["tasks"]}
    assert (tasks["w5"]["pool"], tasks["w5"]["pool_slots"]) == ("two", 1)
    table = _cli(cluster, "dags", "show", "pools_dag", token=VIEWER_TOKEN)
    assert "POOL_SLOTS" in table and "default_pool" in table
    assert cluster.wait_run(client, "pools_dag", "p1").state == common_pb2.RUN_STATE_SUCCESS
    with _web(cluster, VIEWER, VIEWER_PASSWORD) as web:
        operator = {"Authorization": f"Bearer {OPERATOR}"}
        assert web.delete("/api/v1/pools/nope", headers=operator).status_code == 200
        assert web.delete("/api/v1/pools/nope", headers=operator).status_code == 404
    assert "pool 'two' deleted" in _cli(cluster, "pools", "delete", "two", token=OPERATOR)

    # the DB's attempt rows: never three of the pool's attempts at once; no empty one leased
    cluster.wait_caught_up(timeout=60)
    rows = queries.list_task_instances(cluster.engine, "pools_dag", "p1")
    spans = [(r.start_date, r.end_date) for r in rows if r.task_id.startswith("w")]
    assert len(spans) == 6 and all(start and end for start, end in spans)
    edges = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    held = peak = 0
    for _, step in edges:  # an end before a start at the same instant: its slot was free
        held += step
        peak = max(peak, held)
    assert peak <= 2
    empty = {r.task_id: (r.state, r.worker_id) for r in rows if r.task_id in ("start", "end")}
    assert empty == {"start": ("success", None), "end": ("success", None)}
