"""Airflow DAG files end to end on a real cluster: three ``raftsched scheduler`` nodes, a
``raftsched worker`` and a webserver (:class:`webstack.WebStack`), with ``[core]
airflow_imports = true`` on all of them.

- The classic BashOperator tutorial (``raftsched.airflow`` imports): triggered with a conf,
  its tasks run in order, the one that fails its first try succeeds on a retry, and the
  templates render macros and Airflow 2's ``ds`` (a ``timedelta`` schedule: the start of the
  data interval). Its scheduled run (catchup=False: the latest slot) renders the ``ds`` of
  its interval's start, which the run's own data interval in the REST API confirms.
- The TaskFlow ETL tutorial: ``multiple_outputs`` values reach ``load`` through the cluster.
- The same kind of file with its imports unchanged (``from airflow...``) parses on the
  scheduler nodes and runs on the worker (warm fork server or cold process alike).

SQLite only: the Airflow layer compiles to the same DagSpec, and the backends are covered by
test_taskflow_e2e.py and test_params_e2e.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from harness import alive, wait_for
from test_rest_api import _database
from webstack import WebStack

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DAG_IDS = (
    "tutorial",
    "tutorial_taskflow_api",
    "unchanged",
    "past_runs",
    "trigger_controller",
    "trigger_target",
    "run_timeout",
    "xcom_map_demo",
)


def _tasks(stack: WebStack, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    status, page = stack.rest("GET", f"/dags/{dag_id}/runs/{run_id}/task-instances")
    assert status == 200, page
    return {ti["task_id"]: ti for ti in page["task_instances"]}


def _finished(stack: WebStack, dag_id: str, run_id: str, timeout: float = 90) -> str:
    def done() -> str | None:
        status, run = stack.rest("GET", f"/dags/{dag_id}/runs/{run_id}")
        return run["state"] if status == 200 and run["state"] in ("success", "failed") else None

    return wait_for(
        done,
        timeout=timeout,
        what=f"run {dag_id}/{run_id} finished",
        interval=0.3,
        describe=lambda: {k: v["state"] for k, v in _tasks(stack, dag_id, run_id).items()},
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebStack]:
    workdir: Path = tmp_path_factory.mktemp("airflow")
    scheduled = workdir / "scheduled"
    scheduled.mkdir()
    dags = {
        # the scheduled run of the tutorial writes to its default `out`: this test's folder
        "tutorial.py": (FIXTURES / "airflow_dags" / "tutorial.py")
        .read_text()
        .replace('"/nonexistent"', repr(str(scheduled))),
        "taskflow_etl.py": (FIXTURES / "airflow_dags" / "taskflow_etl.py").read_text(),
        "unchanged.py": (FIXTURES / "airflow_unchanged" / "unchanged.py").read_text(),
        "past_runs.py": (FIXTURES / "airflow_dags" / "past_runs.py").read_text(),
        "trigger_dagrun.py": (FIXTURES / "airflow_dags" / "trigger_dagrun.py").read_text(),
        "run_timeout.py": (FIXTURES / "airflow_dags" / "run_timeout.py").read_text(),
        "xcom_map.py": (FIXTURES / "airflow_dags" / "xcom_map.py").read_text(),
    }
    config = {"core": {"airflow_imports": "true"}}
    with (
        _database("sqlite", workdir) as url,
        WebStack(workdir, url, webservers=1, use_nginx=False, dags=dags, config=config) as web,
    ):
        web.start()
        wait_for(
            lambda: all(web.rest("GET", f"/dags/{d}")[0] == 200 for d in DAG_IDS),
            timeout=60,
            what="the Airflow DAGs registered",
            interval=0.3,
        )
        yield web


def _trigger(
    stack: WebStack, dag_id: str, run_id: str, out: Path, *more: str, **params: Any
) -> None:
    out.mkdir(exist_ok=True)
    conf = json.dumps({"out": str(out), **params})
    done = stack.cli("dags", "trigger", dag_id, "--run-id", run_id, "--conf", conf, *more)
    assert done.returncode == 0, done.stderr


def test_the_tutorial_and_the_taskflow_etl_run_on_the_cluster(stack: WebStack) -> None:
    runs = {
        "tutorial": stack.workdir / "tutorial",
        "tutorial_taskflow_api": stack.workdir / "etl",
        "unchanged": stack.workdir / "unchanged",
    }
    for dag_id, out in runs.items():
        _trigger(stack, dag_id, "m1", out)

    assert _finished(stack, "tutorial", "m1") == "success"
    order = (runs["tutorial"] / "order").read_text().splitlines()
    assert order[0] == "print_date"
    assert order.index("sleep try 1") < order.index("sleep try 2")
    tasks = _tasks(stack, "tutorial", "m1")
    assert tasks["sleep"]["try_number"] == 2  # failed once, retried (retries=3, no delay)
    _, run = stack.rest("GET", "/dags/tutorial/runs/m1")
    day = datetime.fromisoformat(run["data_interval_start"]).strftime("%Y-%m-%d")
    templated = (runs["tutorial"] / "templated").read_text().splitlines()
    assert [line.split()[1] for line in templated] == [day] * 3

    assert _finished(stack, "tutorial_taskflow_api", "m1") == "success"
    assert (runs["tutorial_taskflow_api"] / "load").read_text() == "1236.70 float"
    assert _tasks(stack, "tutorial_taskflow_api", "m1")["transform"]["result_json"] == (
        '{"total_order_value":1236.7}'
    )

    assert _finished(stack, "unchanged", "m1") == "success"
    assert (runs["unchanged"] / "which").read_text() == "raftsched.airflow"


def test_the_scheduled_tutorial_run_sees_airflow_2s_ds(stack: WebStack) -> None:
    def scheduled_run() -> dict[str, Any] | None:
        status, page = stack.rest("GET", "/dags/tutorial/runs")
        runs = [r for r in page.get("runs", []) if r["run_type"] == "scheduled"]
        return runs[0] if status == 200 and runs else None

    run = wait_for(scheduled_run, timeout=60, what="the tutorial's scheduled run", interval=0.3)
    start = datetime.fromisoformat(run["data_interval_start"])
    end = datetime.fromisoformat(run["data_interval_end"])
    assert (end - start).days == 1 and end == datetime.fromisoformat(run["logical_date"])
    templated = stack.workdir / "scheduled" / "templated"
    wait_for(templated.exists, timeout=60, what="the scheduled run's templated task", interval=0.3)
    first = templated.read_text().splitlines()[0].split()
    # ds: the interval's start (the run is named by its end), ds_add: a week later
    assert first[1] == start.strftime("%Y-%m-%d")
    assert first[2] == (start + timedelta(days=7)).strftime("%Y-%m-%d")


def test_depends_on_past_holds_a_run_until_the_previous_one_is_done(stack: WebStack) -> None:
    """Two runs of past_runs: the later one's extract (depends_on_past, wait_for_downstream)
    starts only after the earlier run's extract and load succeeded, although its own go-file
    is there from the start; report (depends_on_past=False) is not held back."""
    out = stack.workdir / "past"
    _trigger(stack, "past_runs", "p1", out, "--logical-date", "2024-03-01T00:00:00")
    _trigger(stack, "past_runs", "p2", out, "--logical-date", "2024-03-02T00:00:00")
    (out / "go-20240302").touch()  # p2's extract could finish at once, were it started
    wait_for(
        lambda: _tasks(stack, "past_runs", "p1")["extract"]["state"] == "running",
        timeout=60,
        what="p1's extract running",
        interval=0.3,
    )
    for _ in range(6):  # a few looks over ~2 s: p2's extract is not started
        assert _tasks(stack, "past_runs", "p2")["extract"]["state"] in ("none", None, "")
        time.sleep(0.3)
    (out / "go-20240301").touch()
    assert _finished(stack, "past_runs", "p1") == "success"
    assert _finished(stack, "past_runs", "p2") == "success"
    order = (out / "order").read_text().splitlines()
    assert order.index("extract 2024-03-01") < order.index("load 2024-03-01")
    assert order.index("load 2024-03-01") < order.index("extract 2024-03-02")


def test_xcom_arg_map_runs_on_the_worker_per_mapped_instance(stack: WebStack) -> None:
    out = stack.workdir / "xcom_map"
    _trigger(stack, "xcom_map_demo", "x1", out)
    assert _finished(stack, "xcom_map_demo", "x1") == "success"
    assert (out / "total").read_text() == "/DATA/A.CSV,/DATA/B.CSV,/DATA/C.CSV"
    tasks = _tasks(stack, "xcom_map_demo", "x1")
    assert tasks["load[2]"]["result_json"] == '"/DATA/C.CSV"'


def test_a_run_past_its_dagrun_timeout_fails_and_its_attempt_is_killed(
    stack: WebStack,
) -> None:
    out = stack.workdir / "timeout"
    _trigger(stack, "run_timeout", "rt1", out, sleep=60)
    assert _finished(stack, "run_timeout", "rt1", timeout=60) == "failed"
    tasks = _tasks(stack, "run_timeout", "rt1")
    assert tasks["slow"]["state"] == tasks["after"]["state"] == "skipped"
    assert "dagrun_timeout" in json.dumps(tasks["slow"])
    pid = int((out / "slow.pid").read_text())
    # the revoked lease: the worker's next heartbeat is refused and it kills the attempt
    wait_for(lambda: not alive(pid), timeout=30, what="the timed-out attempt killed", interval=0.3)
    assert not (out / "slow.done").exists() and not (out / "after.done").exists()


def _triggered(stack: WebStack, parent: str) -> list[dict[str, Any]]:
    """The runs of trigger_target whose conf names ``parent`` (the controller's run)."""
    status, page = stack.rest("GET", "/dags/trigger_target/runs?page_size=100")
    assert status == 200, page
    return [r for r in page["runs"] if (r.get("conf") or {}).get("parent") == parent]


def test_trigger_dagrun_creates_the_target_run_with_its_rendered_conf(stack: WebStack) -> None:
    out = stack.workdir / "trigger"
    _trigger(stack, "trigger_controller", "t1", out)
    assert _finished(stack, "trigger_controller", "t1") == "success"
    (made,) = _triggered(stack, "t1")
    assert made["run_type"] == "manual"
    assert _finished(stack, "trigger_target", made["run_id"]) == "success"
    assert (out / "target-t1").read_text() == "from trigger_controller\n"
    xcom = json.loads(_tasks(stack, "trigger_controller", "t1")["trigger"]["result_json"])
    assert xcom["trigger_run_id"] == made["run_id"]
    # an unknown target: the task fails with the reason, and no run is made anywhere
    _trigger(stack, "trigger_controller", "t2", out, target="no_such_dag")
    assert _finished(stack, "trigger_controller", "t2") == "failed"
    failed = _tasks(stack, "trigger_controller", "t2")["trigger"]
    assert failed["state"] == "failed"
    assert "no DAG 'no_such_dag' is registered" in json.dumps(failed)


def test_a_leader_killed_around_the_trigger_leaves_exactly_one_triggered_run(
    stack: WebStack,
) -> None:
    """Last in the module (it kills a node): the controller's `before` ends and its trigger
    task runs while the leader dies; the trigger is decided once, whatever the retries."""
    out = stack.workdir / "failover"
    _trigger(stack, "trigger_controller", "f1", out, hold=True)
    wait_for(
        lambda: _tasks(stack, "trigger_controller", "f1")["before"]["state"] == "running",
        timeout=60,
        what="before running",
        interval=0.2,
    )
    cluster = stack.cluster
    leader = cluster.wait_leader(timeout=30)
    (out / "go").touch()
    time.sleep(0.2)  # before ends; its outcome and the trigger's lease race the kill
    cluster.kill(leader)
    cluster.wait_leader(timeout=45, exclude=(leader,))
    try:
        assert _finished(stack, "trigger_controller", "f1", timeout=120) == "success"
        made = _triggered(stack, "f1")
        assert len(made) == 1, made
        assert _finished(stack, "trigger_target", made[0]["run_id"], timeout=90) == "success"
        assert (out / "target-f1").read_text() == "from trigger_controller\n"
    finally:
        cluster.start_node(leader)
