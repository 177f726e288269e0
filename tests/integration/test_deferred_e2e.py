"""Deferred tasks end to end, on SQLite and on PostgreSQL: three real scheduler nodes, a real
`raftsched worker` and real `raftsched triggerer` processes.

200 Python tasks each defer on a file trigger (a file of their own). Once they all wait,
they are DEFERRED and hold no worker slot (the worker's running attempts, as the workers page
reads them, are none). Half the files appear; the triggerer is killed -9 while the other half
still wait; a second triggerer takes over their leases once they expire; the other files
appear. Every task resumes exactly once, with its own file's event: two attempts each
(the deferral, then the resumed one that returns its number), and the run succeeds.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from api_harness import WORKER, ApiCluster, WorkerProc
from cryptography.fernet import Fernet
from google.protobuf import timestamp_pb2
from harness import child_env, wait_for
from test_rest_api import _database

from raftsched.api.gen import common_pb2, dag_pb2, secret_pb2, worker_pb2
from raftsched.core.versions import RELEASE

pytestmark = pytest.mark.slow

N = 200
DAG_ID = "deferred_files"
RUN_ID = "d1"

DAG_SOURCE = """
from raftsched import DAG, PythonTask
from raftsched.dags.deferral import FileTrigger, TaskDeferred

FOLDER = {folder!r}


def wait(n):
    raise TaskDeferred(FileTrigger(f"{{FOLDER}}/f{{n}}"), "resume", {{"n": n}}, timeout=600)


def resume(n, event):
    assert event["path"] == f"{{FOLDER}}/f{{n}}", event
    print("resumed", n, "size", event["size"])
    return n


with DAG("deferred_files", schedule=None, max_active_tasks=1000):
    for i in range({n}):
        PythonTask(f"t{{i:03d}}", fn=wait, kwargs={{"n": i}})
"""


SENSORS_SOURCE = """
from datetime import UTC, datetime
from pathlib import Path

from raftsched.airflow import DAG
from raftsched.airflow.decorators import task
from raftsched.airflow.sensors.base import PokeReturnValue
from raftsched.airflow.sensors.date_time import DateTimeSensorAsync
from raftsched.airflow.sensors.filesystem import FileSensor
from raftsched.dags.deferral import BaseTrigger, TaskDeferred

FOLDER = {folder!r}


class Broken(BaseTrigger):
    kind = "user:no_such_module.Trigger"

    def args(self):
        return {{}}


def broken():
    raise TaskDeferred(Broken(), "broken", {{}})


with DAG("sensors", schedule=None, start_date=datetime(2024, 1, 1, tzinfo=UTC)):
    FileSensor(task_id="file", filepath=FOLDER + "/sensed", poke_interval=1, deferrable=True)

    @task.sensor(poke_interval=1, timeout=120, mode="reschedule")
    def marker(path):
        return PokeReturnValue(Path(path).exists(), "seen")

    marker(FOLDER + "/marker")
    DateTimeSensorAsync(task_id="past", target_time=datetime(2000, 1, 1, tzinfo=UTC))

from raftsched import DAG as NativeDag, PythonTask

with NativeDag("broken_trigger", schedule=None):
    PythonTask("t", fn=broken)
"""


CROSS_SOURCE = """
from datetime import UTC, datetime

from raftsched.airflow import DAG
from raftsched.airflow.operators.bash import BashOperator
from raftsched.airflow.providers.common.sql.sensors.sql import SqlSensor
from raftsched.airflow.sensors.external_task import ExternalTaskSensor

START = datetime(2024, 1, 1, tzinfo=UTC)

with DAG("producer", schedule=None, start_date=START):
    BashOperator(task_id="load", bash_command="true")

with DAG("consumer", schedule=None, start_date=START):
    ExternalTaskSensor(
        task_id="wait_load",
        external_dag_id="producer",
        external_task_id="load",
        failed_states=["failed"],
        poke_interval=1,
        deferrable=True,
        retries=1,  # an attempt lost under a loaded CI machine must not fail the test
    )
    SqlSensor(
        task_id="wait_row",
        conn_id="warehouse",
        sql="SELECT COUNT(*) FROM landing WHERE day = :day",
        parameters={{"day": "2024-06-01"}},
        poke_interval=1,
        deferrable=True,
        retries=1,
    )
"""


# An Airflow-shaped pair: the parent's TriggerDagRunOperator(wait_for_completion=True)
# triggers the child and waits (deferred) for its run; the child's task waits for a gate
# file, then fails when its conf says so. reset_dag_run reruns the child's run "again".
WAIT_SOURCE = """
from datetime import UTC, datetime

from raftsched.airflow import DAG
from raftsched.airflow.operators.bash import BashOperator
from raftsched.airflow.operators.trigger_dagrun import TriggerDagRunOperator
from raftsched.airflow.utils.state import DagRunState

START = datetime(2024, 1, 1, tzinfo=UTC)
FOLDER = {folder!r}

with DAG("child", schedule=None, start_date=START):
    BashOperator(
        task_id="work",
        bash_command=(
            'for i in $(seq 1200); do [ -e "{{{{ dag_run.conf["gate"] }}}}" ] && break; sleep 0.1;'
            ' done; echo "{{{{ run_id }}}}" >> "' + FOLDER + '/child-runs";'
            ' test "{{{{ dag_run.conf["fail"] }}}}" != "yes"'
        ),
    )

with DAG(
    "parent",
    schedule=None,
    start_date=START,
    params={{"fail": "no", "gate": "/nonexistent", "child_run": ""}},
):
    wait = TriggerDagRunOperator(
        task_id="trigger_wait",
        trigger_dag_id="child",
        trigger_run_id="{{{{ params.child_run }}}}",
        conf={{"fail": "{{{{ params.fail }}}}", "gate": "{{{{ params.gate }}}}"}},
        reset_dag_run=True,
        wait_for_completion=True,
        poke_interval=1,
        allowed_states=[DagRunState.SUCCESS],
        failed_states=[DagRunState.FAILED],
        deferrable=True,
    )
    after = BashOperator(
        task_id="after",
        bash_command=(
            "echo \\"{{{{ ti.xcom_pull(task_ids='trigger_wait')['trigger_run_id'] }}}}\\""
            ' >> "' + FOLDER + '/after"'
        ),
    )
    wait >> after
"""


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ApiCluster, Path]]:
    workdir: Path = tmp_path_factory.mktemp(f"deferred-{request.param}")
    files = workdir / "files"
    files.mkdir()
    source = DAG_SOURCE.format(folder=str(files), n=N)
    with (
        _database(request.param, workdir) as url,
        ApiCluster(
            workdir / "cluster",
            url,
            dags={
                "deferred.py": source,
                "sensors.py": SENSORS_SOURCE.format(folder=str(files)),
                "cross.py": CROSS_SOURCE.format(),
                "trigger_wait.py": WAIT_SOURCE.format(folder=str(files)),
            },
            config={
                "triggerer": {"lease_ttl": 3, "heartbeat_interval": 0.5},
                "secrets": {"fernet_key": Fernet.generate_key().decode()},
            },
        ) as harness,
    ):
        harness.start()
        harness.wait_leader()
        harness.wait_dags(
            harness.client(),
            {DAG_ID, "sensors", "broken_trigger", "producer", "consumer", "parent", "child"},
        )
        wait_for(  # a deferral is new in this release: refused until the cluster runs it
            lambda: all(
                (st or {}).get("cluster_version") == RELEASE for st in harness.statuses().values()
            ),
            timeout=30,
            what="the cluster version of this release",
        )
        yield harness, files


def start_triggerer(cluster: ApiCluster, name: str) -> WorkerProc:
    servers = ",".join(cluster.api_addresses)
    args = ["triggerer", "--server", servers, "--token", WORKER, "--triggerer-id", name]
    proc = WorkerProc(
        index=200 + len(cluster.extra),
        address=f"triggerer {name}",
        config_path=cluster.config_path,
        log_path=cluster.log_dir / f"triggerer-{name}.log",
        env=child_env(),
        args=args,
        python=sys.executable,
    )
    proc.start()
    cluster.extra.append(proc)
    return proc


def _metrics(admin_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in lines
        if line and not line.startswith("#")
    }


def attempts(cluster: ApiCluster, client: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for ti in cluster.task_instances(client, DAG_ID, RUN_ID):
        out.setdefault(ti.key.task_id, []).append(ti)
    return out


def count(cluster: ApiCluster, client: Any, state: int) -> int:
    return sum(1 for ti in cluster.current(client, DAG_ID, RUN_ID).values() if ti.state == state)


def test_deferred_tasks_free_their_slots_and_resume_once(
    cluster: tuple[ApiCluster, Path],
) -> None:
    harness, files = cluster
    client = harness.client()
    harness.start_worker("w1", concurrency=8)
    first = start_triggerer(harness, "trig-a")
    client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id=DAG_ID, run_id=RUN_ID))
    deferred = common_pb2.TASK_STATE_DEFERRED
    wait_for(
        lambda: count(harness, client, deferred) == N,
        timeout=240,
        what=f"all {N} tasks deferred",
        interval=0.5,
    )
    workers = client.workers.ListWorkers(worker_pb2.ListWorkersRequest()).workers
    (w1,) = [w for w in workers if w.worker_id == "w1"]
    assert list(w1.running) == []  # 200 waiting tasks, no slot taken
    admin = harness.nodes[0].admin_url
    deferred_now = wait_for(  # all leased by the triggerer
        lambda: (m := _metrics(admin))["raftsched_triggers_running"] == N and m,
        timeout=30,
        what="every trigger leased",
    )
    assert deferred_now['raftsched_task_instances{state="deferred"}'] == N

    for i in range(0, N, 2):  # half of them fire under the first triggerer
        (files / f"f{i}").write_text("x" * i)
    wait_for(
        lambda: count(harness, client, common_pb2.TASK_STATE_SUCCESS) >= N // 4,
        timeout=120,
        what="some resumed tasks done",
        interval=0.5,
    )
    first.kill()  # mid-wait: the others' leases now expire
    start_triggerer(harness, "trig-b")
    for i in range(1, N, 2):
        (files / f"f{i}").write_text("y")
    run = harness.wait_run(client, DAG_ID, RUN_ID, timeout=300)
    assert run.state == common_pb2.RUN_STATE_SUCCESS

    firings = wait_for(
        lambda: (
            (m := _metrics(harness.nodes[0].admin_url))["raftsched_trigger_firings_total"] >= N
            and m
        ),
        timeout=30,
        what="every firing counted",
    )
    assert firings["raftsched_trigger_firings_total"] == N  # each file once, across triggerers
    assert firings["raftsched_trigger_errors_total"] == 0
    by_task = attempts(harness, client)
    assert len(by_task) == N
    for task_id, tis in by_task.items():
        states = sorted((ti.try_number, ti.state) for ti in tis)
        assert states == [(1, deferred), (2, common_pb2.TASK_STATE_SUCCESS)], (task_id, states)


def test_sensors_and_a_raising_trigger(cluster: tuple[ApiCluster, Path]) -> None:
    """Runs after the test above (same cluster, its worker and second triggerer)."""
    harness, files = cluster
    client = harness.client()
    for dag_id in ("sensors", "broken_trigger"):
        client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id=dag_id, run_id="s1"))
    failed = harness.wait_run(client, "broken_trigger", "s1", timeout=120)
    assert failed.state == common_pb2.RUN_STATE_FAILED
    (ti,) = harness.current(client, "broken_trigger", "s1").values()
    assert ti.message.startswith("trigger failed: ModuleNotFoundError"), ti.message
    log = dag_pb2.GetTaskLogRequest(dag_id="broken_trigger", run_id="s1", task_id="t")
    # the failure and its log chunk commit together, but a log read may answer from a node
    # (or the DB) a moment behind the one that reported the run failed

    def logged() -> str | None:
        text = "".join(chunk.text for chunk in client.dags.GetTaskLog(log))
        return text if "Traceback" in text else None

    text = wait_for(
        logged,
        timeout=30,
        what="the trigger's traceback in the task log",
    )
    assert "Traceback" in text and "no_such_module" in text
    harness.wait_task(
        client, "sensors", "s1", "file", lambda t: t.state == common_pb2.TASK_STATE_DEFERRED
    )
    (files / "sensed").write_text("x")
    (files / "marker").write_text("x")
    run = harness.wait_run(client, "sensors", "s1", timeout=120)
    assert run.state == common_pb2.RUN_STATE_SUCCESS
    tries = {k: v.try_number for k, v in harness.current(client, "sensors", "s1").items()}
    assert tries["file"] == 2 and tries["past"] == 1 and tries["marker"] >= 2, tries


def test_external_task_and_sql_sensors_wait_on_the_triggerer(
    cluster: tuple[ApiCluster, Path],
) -> None:
    """ExternalTaskSensor(deferrable) waits for another DAG's task at the same logical date,
    SqlSensor(deferrable) for a row the test inserts; the triggerer asks the cluster for the
    other run's state and fetches the declared connection under each trigger's lease."""
    harness, files = cluster
    client = harness.client()
    data = sa.create_engine(f"sqlite:///{files / 'warehouse.db'}")
    with data.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE landing (day TEXT, n INTEGER)")
    client.secrets.SetSecret(
        secret_pb2.SetSecretRequest(
            kind="connection", key="warehouse", value=f"sqlite:///{files / 'warehouse.db'}"
        )
    )
    when = timestamp_pb2.Timestamp()
    when.FromJsonString("2024-06-01T00:00:00Z")
    client.dags.TriggerDag(
        dag_pb2.TriggerDagRequest(dag_id="consumer", run_id="c1", logical_date=when)
    )
    deferred = common_pb2.TASK_STATE_DEFERRED
    settled = {deferred, common_pb2.TASK_STATE_FAILED, common_pb2.TASK_STATE_SUCCESS}
    for task_id in ("wait_load", "wait_row"):
        ti = harness.wait_task(client, "consumer", "c1", task_id, lambda t: t.state in settled)
        if ti.state != deferred:  # say why: the attempt's message and its log
            request = dag_pb2.GetTaskLogRequest(dag_id="consumer", run_id="c1", task_id=task_id)
            text = "".join(chunk.text for chunk in client.dags.GetTaskLog(request))
            pytest.fail(f"{task_id}: {ti.state} {ti.message!r}\n{text[-3000:]}")
    with data.begin() as conn:  # another day's row: not what the query waits for
        conn.exec_driver_sql("INSERT INTO landing VALUES ('2024-05-31', 1)")
    client.dags.TriggerDag(
        dag_pb2.TriggerDagRequest(dag_id="producer", run_id="p1", logical_date=when)
    )
    harness.wait_task(
        client, "consumer", "c1", "wait_load", lambda t: t.state == common_pb2.TASK_STATE_SUCCESS
    )
    assert harness.current(client, "consumer", "c1")["wait_row"].state == deferred
    with data.begin() as conn:
        conn.exec_driver_sql("INSERT INTO landing VALUES ('2024-06-01', 2)")
    data.dispose()
    run = harness.wait_run(client, "consumer", "c1", timeout=120)
    assert run.state == common_pb2.RUN_STATE_SUCCESS
    history: dict[str, list[tuple[int, int]]] = {}
    for ti in harness.task_instances(client, "consumer", "c1"):
        history.setdefault(ti.key.task_id, []).append((ti.try_number, ti.state))
    for task_id, tries in history.items():  # the last wait deferred once, then resumed once
        states = [state for _, state in sorted(tries)]
        assert states[-2:] == [deferred, common_pb2.TASK_STATE_SUCCESS], (task_id, tries)


def _running_tasks(client: Any) -> set[str]:
    workers = client.workers.ListWorkers(worker_pb2.ListWorkersRequest()).workers
    return {f"{a.key.dag_id}/{a.key.task_id}" for w in workers for a in w.running}


def test_trigger_dagrun_waits_for_its_run_without_a_slot_once_across_a_failover(
    cluster: tuple[ApiCluster, Path],
) -> None:
    """Last in the module (it kills the leader). TriggerDagRunOperator(wait_for_completion=
    True) creates the child's run and waits DEFERRED (no worker slot) while the child's task
    runs; the leader is killed mid-wait; the child succeeds and the waiting task succeeds
    once (one attempt, the child run made once). A failing child run fails it with the
    reason; reset_dag_run runs an existing child run again instead of failing."""
    harness, files = cluster
    client = harness.client()
    if "w1" not in harness.workers:  # (run alone: the first test starts them)
        harness.start_worker("w1", concurrency=8)
        start_triggerer(harness, "trig-w")
    gate = files / "gate"
    deferred = common_pb2.TASK_STATE_DEFERRED
    success = common_pb2.TASK_STATE_SUCCESS

    def trigger(run_id: str, **conf: str) -> None:
        request = dag_pb2.TriggerDagRequest(
            dag_id="parent", run_id=run_id, conf_json=json.dumps({"gate": str(gate), **conf})
        )
        client.dags.TriggerDag(request)

    trigger("p1", child_run="kid1")
    # (generous bounds: a task's process starts slowly on a loaded CI machine)
    harness.wait_task(
        client, "parent", "p1", "trigger_wait", lambda t: t.state == deferred, timeout=180
    )
    harness.wait_task(
        client,
        "child",
        "kid1",
        "work",
        lambda t: t.state == common_pb2.TASK_STATE_RUNNING,
        timeout=180,
    )

    def only_the_child() -> bool:  # the workers' reports of what they run (heartbeats)
        running = _running_tasks(client)
        return "child/work" in running and "parent/trigger_wait" not in running

    wait_for(
        only_the_child,
        timeout=30,
        what="the child's task running on a worker, the waiting task on none",
        describe=lambda: _running_tasks(client),
    )
    waiting = harness.current(client, "parent", "p1")["trigger_wait"]
    assert "waiting for run kid1 of DAG 'child'" in waiting.message, waiting.message

    leader = harness.wait_leader(timeout=30)
    harness.kill(leader)  # mid-wait: the wait and the child's run are committed decisions
    harness.wait_leader(timeout=45, exclude=(leader,))
    try:
        gate.touch()
        run = harness.wait_run(client, "parent", "p1", timeout=240)
        assert run.state == common_pb2.RUN_STATE_SUCCESS
    finally:
        harness.start_node(leader)
    tries = [
        (ti.try_number, ti.state)
        for ti in harness.task_instances(client, "parent", "p1")
        if ti.key.task_id == "trigger_wait"
    ]
    assert tries == [(1, success)], tries  # one attempt: the wait ended once, in the core
    done = harness.current(client, "parent", "p1")["trigger_wait"]
    assert "reached an allowed state" in done.message, done.message
    assert (files / "child-runs").read_text().split() == ["kid1"]  # the child ran once
    assert (files / "after").read_text().split() == ["kid1"]  # its XCom: the run's ids

    trigger("p2", child_run="kid2", fail="yes")  # the gate is there: the child fails at once
    run = harness.wait_run(client, "parent", "p2", timeout=180)
    assert run.state == common_pb2.RUN_STATE_FAILED
    failed = harness.current(client, "parent", "p2")["trigger_wait"]
    assert failed.state == common_pb2.TASK_STATE_FAILED
    assert "the triggered run kid2 of DAG 'child' ended failed" in failed.message, failed.message

    trigger("p3", child_run="kid1")  # kid1 exists (success): reset_dag_run runs it again
    run = harness.wait_run(client, "parent", "p3", timeout=180)
    assert run.state == common_pb2.RUN_STATE_SUCCESS
    assert (files / "child-runs").read_text().split() == ["kid1", "kid2", "kid1"]
    kid1 = [
        (ti.try_number, ti.state)
        for ti in harness.task_instances(client, "child", "kid1")
        if ti.key.task_id == "work"
    ]
    assert kid1 == [(1, success), (2, success)], kid1
