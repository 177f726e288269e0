"""Assets end to end, on SQLite and on PostgreSQL: three real scheduler nodes and a worker
(docs/architecture.md §21).

A producer's task has outlets A and B; two consumers are scheduled on both (``A & B`` and
Airflow's ``schedule=[A, B]``). Each producer success runs each consumer exactly once, with
the producer's two events in its context; also when the leader is killed while the
producer's task runs (its outcome, its events and the consumer runs are one entry, so no
failover can split them). An event from outside sent again with the same event id (a retried
REST POST, then the CLI) makes one event and one run.
The assets pages and REST routes show producers, consumers and events. The DB gets every event
and which run carried it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from api_harness import ADMIN, OPERATOR, VIEWER, ApiCluster
from harness import child_env, wait_for
from test_deferred_e2e import start_triggerer
from test_rest_api import _database

from raftsched.api.gen import asset_pb2, common_pb2, dag_pb2, user_pb2
from raftsched.core.versions import RELEASE

pytestmark = pytest.mark.slow

A, B, C = "s3://lake/a", "s3://lake/b", "file:///landing/c.csv"
D, E = "s3://lake/d", "s3://lake/e"  # a task sets their extras (outlet_events, Metadata)
W = "file:///landing/watched"  # a file watcher's asset (AssetWatcher)

DAGS = """
import json

from raftsched import DAG, Asset, BashTask
from raftsched.airflow.datasets.metadata import Metadata
from raftsched.airflow.sdk import task
from raftsched.airflow import DAG as AirflowDAG
from raftsched.airflow.datasets import Dataset
from raftsched.airflow.operators.bash import BashOperator

OUT = {out!r}
A, B = Asset({a!r}), Asset({b!r})

with DAG("producer", schedule=None):
    BashTask("make", command="sleep {{{{ conf.get('sleep', 0) }}}}", outlets=[A, B])

with DAG("consumer_and", schedule=A & B):
    BashTask(
        "use",
        command="echo {{{{ run_id }}}} {{{{ triggering_asset_events | length }}}}"
        " {{{{ triggering_asset_events[{a!r}][0].source_run_id }}}} >>" + OUT + "/and",
    )

with AirflowDAG("consumer_list", schedule=[Dataset({a!r}), Dataset({b!r})]):
    BashOperator(
        task_id="use",
        bash_command="echo {{{{ run_id }}}} {{{{ triggering_dataset_events | length }}}} >>"
        + OUT + "/list",
    )

D, E = Asset({d!r}), Asset({e!r})

with AirflowDAG("extras_producer", schedule=None):

    @task(outlets=[D, E])
    def make(outlet_events=None):
        outlet_events[D].extra = {{"rows": 5}}
        yield Metadata(E, extra={{"part": "2026-12-05"}})
        return "made"

    make()

with AirflowDAG("extras_consumer", schedule=D & E):

    @task
    def read(triggering_asset_events=None):
        seen = {{u: [e["extra"] for e in evs] for u, evs in triggering_asset_events.items()}}
        with open(OUT + "/extras", "a") as f:
            f.write(json.dumps(seen, sort_keys=True) + "\\n")

    read()

from raftsched import AssetWatcher
from raftsched.dags.deferral import FileTrigger

LANDED = Asset({w!r}, watchers=[AssetWatcher("landing", FileTrigger({wpath!r}))])

with DAG("on_watch", schedule=LANDED):
    BashTask("use", command="echo {{{{ run_id }}}} >>" + OUT + "/watched")

with DAG("on_landing", schedule=Asset({c!r})):
    BashTask(
        "use",
        command="echo {{{{ triggering_asset_events[{c!r}][0].extra.rows }}}} >>" + OUT + "/c",
    )
"""

CONSUMERS = ("consumer_and", "consumer_list")
EXTRAS_DAGS = ("extras_producer", "extras_consumer")
CSRF = re.compile(r'name="csrf-token" content="([^"]+)"')


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ApiCluster, Path]]:
    workdir: Path = tmp_path_factory.mktemp(f"assets-{request.param}")
    out = workdir / "out"
    out.mkdir()
    source = DAGS.format(out=str(out), a=A, b=B, c=C, d=D, e=E, w=W, wpath=str(out / "landed"))
    with (
        _database(request.param, workdir) as url,
        ApiCluster(workdir / "cluster", url, dags={"assets.py": source}, lease_ttl=10) as harness,
    ):
        harness.start()
        harness.wait_leader()
        harness.wait_dags(
            harness.client(),
            {"producer", *CONSUMERS, "on_landing", "on_watch", *EXTRAS_DAGS},
            timeout=90,
        )
        wait_for(  # assets are new in this release: refused until the cluster runs it
            lambda: all(
                (st or {}).get("cluster_version") == RELEASE for st in harness.statuses().values()
            ),
            timeout=30,
            what="the cluster version of this release",
        )
        harness.start_worker("w1", concurrency=4)
        yield harness, out


def asset_runs(client: Any, dag_id: str) -> list[Any]:
    request = dag_pb2.ListRunsRequest(dag_id=dag_id, run_type=common_pb2.RUN_TYPE_ASSET_TRIGGERED)
    return list(client.dags.ListRuns(request).runs)


def wait_asset_runs(harness: ApiCluster, client: Any, dag_id: str, n: int) -> list[Any]:
    runs = wait_for(
        lambda: (found := asset_runs(client, dag_id)) and len(found) >= n and found,
        timeout=90,
        what=f"{n} asset-triggered run(s) of {dag_id}",
        interval=0.3,
    )
    for run in runs:
        assert harness.wait_run(client, dag_id, run.run_id).state == common_pb2.RUN_STATE_SUCCESS
    return runs


def produce(harness: ApiCluster, client: Any, run_id: str, sleep: int = 0) -> None:
    client.dags.TriggerDag(
        dag_pb2.TriggerDagRequest(
            dag_id="producer", run_id=run_id, conf_json=json.dumps({"sleep": sleep})
        )
    )


def metrics_text(harness: ApiCluster) -> str | None:
    for node in harness.nodes:
        try:
            with urllib.request.urlopen(f"{node.admin_url}/metrics", timeout=5) as answer:
                return str(answer.read().decode())
        except OSError:
            continue
    return None


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def db_rows(harness: ApiCluster, query: str) -> list[Any]:
    with harness.engine.connect() as conn:
        return list(conn.execute(sa.text(query)))


def test_each_producer_success_runs_each_consumer_once_across_a_leader_kill(
    cluster: tuple[ApiCluster, Path],
) -> None:
    harness, out = cluster
    client = harness.client()
    produce(harness, client, "p1")
    assert harness.wait_run(client, "producer", "p1").state == common_pb2.RUN_STATE_SUCCESS
    for dag_id in CONSUMERS:
        assert len(wait_asset_runs(harness, client, dag_id, 1)) == 1
    assert [line.split()[1:] for line in lines(out / "and")] == [["2", "p1"]]
    assert [line.split()[1] for line in lines(out / "list")] == ["2"]
    (first_and,) = asset_runs(client, "consumer_and")
    render = [sys.executable, "-m", "raftsched", "tasks", "render", "consumer_and"]
    render += [first_and.run_id, "use", "--server", ",".join(harness.api_addresses)]
    rendered = subprocess.run(  # what the task page shows: the run's events rendered too
        [*render, "--token", ADMIN, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert rendered.returncode == 0, rendered.stderr
    assert f"{first_and.run_id} 2 p1" in json.loads(rendered.stdout)["command"]

    # the leader dies while the producer's task runs: its outcome, its two events and the
    # consumers' runs are committed by the next leader, together, once
    produce(harness, client, "p2", sleep=4)
    harness.wait_task(
        client, "producer", "p2", "make", lambda ti: ti.state == common_pb2.TASK_STATE_RUNNING
    )
    leader = harness.wait_leader()
    harness.kill(leader)
    harness.wait_leader(exclude={leader}, timeout=60)
    harness.start_node(leader)
    client = harness.client()
    assert harness.wait_run(client, "producer", "p2").state == common_pb2.RUN_STATE_SUCCESS
    for dag_id in CONSUMERS:
        wait_asset_runs(harness, client, dag_id, 2)
    time.sleep(2)  # nothing more comes
    for dag_id in CONSUMERS:
        assert len(asset_runs(client, dag_id)) == 2, dag_id
    assert [line.split()[1:] for line in lines(out / "and")] == [["2", "p1"], ["2", "p2"]]

    (a,) = [s for s in client.assets.ListAssets(asset_pb2.ListAssetsRequest()).assets if s.uri == A]
    assert a.event_count == 2 and list(a.producers) == ["producer.make"]
    assert sorted(a.consumers) == sorted(CONSUMERS) and not a.queued_for
    # any node's: the killed leader may still be opening its admin port after its restart
    metrics = wait_for(lambda: metrics_text(harness), timeout=30, what="a node's /metrics")
    assert "raftsched_asset_events_total" in metrics

    harness.wait_caught_up()
    events = db_rows(harness, "SELECT uri, source_run_id FROM asset_event ORDER BY id")
    assert [tuple(r) for r in events] == [(A, "p1"), (B, "p1"), (A, "p2"), (B, "p2")]
    links = db_rows(harness, "SELECT dag_id, COUNT(*) FROM asset_event_run GROUP BY dag_id")
    assert dict((r[0], r[1]) for r in links) == {d: 4 for d in CONSUMERS}
    harness.assert_replicas_agree()


def web_app(harness: ApiCluster) -> Any:
    from raftsched.web import create_app

    return create_app(
        {
            "TESTING": True,
            "SECRET_KEY": "a-test-secret",
            "RAFTSCHED_SERVERS": harness.api_addresses,
            "RAFTSCHED_TOKEN": ADMIN,
            "RAFTSCHED_DEADLINE": 10.0,
        }
    )


def test_an_event_sent_twice_with_one_id_makes_one_run(cluster: tuple[ApiCluster, Path]) -> None:
    harness, out = cluster
    client = harness.client(OPERATOR)
    web = web_app(harness).test_client()
    operator = {"Authorization": f"Bearer {OPERATOR}"}
    body = {"uri": C, "extra": {"rows": 7}, "event_id": "landing-1"}
    first = web.post("/api/v1/assets/events", json=body, headers=operator)
    assert first.status_code == 201, first.get_data(as_text=True)
    assert not first.json["duplicate"] and [r["dag_id"] for r in first.json["runs"]] == [
        "on_landing"
    ]
    again = web.post("/api/v1/assets/events", json=body, headers=operator)  # a retried POST
    assert again.status_code == 201 and again.json["duplicate"] and again.json["runs"] == []
    viewer = {"Authorization": f"Bearer {VIEWER}"}
    refused = web.post("/api/v1/assets/events", json=body, headers=viewer)
    assert refused.status_code == 403
    argv = [sys.executable, "-m", "raftsched", "assets", "event", C, "--extra", '{"rows": 7}']
    argv += ["--id", "landing-1", "--server", ",".join(harness.api_addresses)]
    argv += ["--token", OPERATOR, "-o", "json"]
    cli = subprocess.run(  # and once more, through the CLI
        argv, capture_output=True, text=True, timeout=60, env=child_env()
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == {"id": first.json["id"], "duplicate": True, "runs": []}
    (run,) = wait_asset_runs(harness, client, "on_landing", 1)
    assert run.run_id == first.json["runs"][0]["run_id"]
    assert lines(out / "c") == ["7"]

    servers = ["--server", ",".join(harness.api_addresses), "--token", VIEWER]
    shown = subprocess.run(
        [sys.executable, "-m", "raftsched", "assets", "show", C, *servers],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert shown.returncode == 0 and "landing-1" in shown.stdout, shown.stderr
    listed_cli = subprocess.run(
        [sys.executable, "-m", "raftsched", "assets", "list", "-o", "json", *servers],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert listed_cli.returncode == 0, listed_cli.stderr
    (landing,) = [a for a in json.loads(listed_cli.stdout) if a["uri"] == C]
    assert landing["consumers"] == ["on_landing"] and landing["event_count"] == 1
    detail = web.get(f"/api/v1/assets/{quote(C, safe='')}", headers=viewer)
    assert detail.status_code == 200, detail.get_data(as_text=True)
    assert [(e["event_id"], e["extra"]) for e in detail.json["events"]] == [
        ("landing-1", {"rows": 7})
    ]
    listed = web.get("/api/v1/assets", headers=viewer).json["assets"]
    assert {a["uri"] for a in listed} >= {A, B, C}
    harness.client().users.CreateUser(
        user_pb2.CreateUserRequest(username="ann", password="ann-password", role="viewer")
    )
    token = CSRF.search(web.get("/login").get_data(as_text=True)).group(1)
    login = {"username": "ann", "password": "ann-password", "csrf_token": token}
    assert web.post("/login", data=login).status_code == 302
    page = web.get("/assets").get_data(as_text=True)
    assert C in page and "on_landing" in page and "producer.make" in page
    consumer = web.get("/dags/consumer_and").get_data(as_text=True)  # its edges, as links
    assert 'id="asset-schedule"' in consumer and f"{A} &amp; {B}" in consumer
    producer = web.get("/dags/producer").get_data(as_text=True)
    assert 'id="asset-outlets"' in producer and B in producer
    one = web.get(f"/assets/{quote(C, safe='')}").get_data(as_text=True)
    assert ("landing-1" in one and "&#34;rows&#34;: 7" in one) or '"rows": 7' in one


def test_a_tasks_outlet_extras_reach_the_consumer_and_are_shown(
    cluster: tuple[ApiCluster, Path],
) -> None:
    """An Airflow @task sets ``outlet_events[D].extra`` and yields ``Metadata(E, extra=...)``:
    its success's events carry them, the consumer's ``triggering_asset_events`` has them,
    and ``assets show``, REST and the DB show them."""
    harness, out = cluster
    client = harness.client()
    client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="extras_producer", run_id="x1"))
    assert harness.wait_run(client, "extras_producer", "x1").state == common_pb2.RUN_STATE_SUCCESS
    (run,) = wait_asset_runs(harness, client, "extras_consumer", 1)
    assert [json.loads(line) for line in lines(out / "extras")] == [
        {D: [{"rows": 5}], E: [{"part": "2026-12-05"}]}
    ]
    events = json.loads(run.asset_events_json)
    assert {e["uri"]: json.loads(e["extra_json"]) for e in events} == {
        D: {"rows": 5},
        E: {"part": "2026-12-05"},
    }
    servers = ["--server", ",".join(harness.api_addresses), "--token", VIEWER]
    shown = subprocess.run(
        [sys.executable, "-m", "raftsched", "assets", "show", D, "-o", "json", *servers],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert shown.returncode == 0, shown.stderr
    (event,) = json.loads(shown.stdout)["events"]
    assert event["extra"] == {"rows": 5} and event["source_run_id"] == "x1"
    web = web_app(harness).test_client()
    detail = web.get(
        f"/api/v1/assets/{quote(E, safe='')}", headers={"Authorization": f"Bearer {VIEWER}"}
    )
    assert [e["extra"] for e in detail.json["events"]] == [{"part": "2026-12-05"}]
    harness.wait_caught_up()
    rows = db_rows(harness, f"SELECT extra FROM asset_event WHERE uri = '{D}'")
    assert [json.loads(r[0]) for r in rows] == [{"rows": 5}]


def land(path: Path, text: str) -> None:
    """A new version of the watched file, whole at once (written aside, then renamed)."""
    aside = path.with_suffix(".tmp")
    aside.write_text(text)
    aside.replace(path)


def test_a_file_watcher_makes_one_run_per_file_version_across_a_triggerer_death(
    cluster: tuple[ApiCluster, Path],
) -> None:
    """The watcher is registered with its DAG; a triggerer runs it. Writing the file makes
    exactly one event and one consumer run; a second triggerer that takes the watcher over
    after the first is killed does not fire again for the same file, only for a new version."""
    harness, out = cluster
    client = harness.client()
    first = start_triggerer(harness, "watch-1")
    land(out / "landed", "v1")
    (run,) = wait_asset_runs(harness, client, "on_watch", 1)
    (event,) = json.loads(run.asset_events_json)
    assert event["uri"] == W and event["actor"] == "watcher landing"
    assert json.loads(event["extra_json"])["from_trigger"] is True
    first.kill()  # its watcher's lease expires; the next triggerer takes it over
    second = start_triggerer(harness, "watch-2")
    log = harness.log_dir / "triggerer-watch-2.log"
    wait_for(  # the watcher's lease expired and the second triggerer took it over
        lambda: log.exists() and "leased 1 trigger(s)" in log.read_text(),
        timeout=60,
        what="the watcher leased by the second triggerer",
        interval=0.5,
    )
    time.sleep(3)  # it runs the trigger on the same file: nothing comes
    assert len(asset_runs(client, "on_watch")) == 1
    land(out / "landed", "v2")
    wait_asset_runs(harness, client, "on_watch", 2)
    time.sleep(3)  # nothing more comes
    assert len(asset_runs(client, "on_watch")) == 2
    assert len(lines(out / "watched")) == 2
    (watched,) = [
        a for a in client.assets.ListAssets(asset_pb2.ListAssetsRequest()).assets if a.uri == W
    ]
    assert watched.event_count == 2 and list(watched.watchers) == ["on_watch.landing (file)"]
    viewer = {"Authorization": f"Bearer {VIEWER}"}
    detail = (
        web_app(harness).test_client().get(f"/api/v1/assets/{quote(W, safe='')}", headers=viewer)
    )
    assert detail.json["watchers"] == ["on_watch.landing (file)"], detail.json
    second.kill()
    harness.assert_replicas_agree()
