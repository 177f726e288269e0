"""TaskFlow, XCom, branching and skips end to end, on SQLite and on PostgreSQL.

Everything is real (:class:`webstack.WebStack`, one per backend, shared by the module): three
``raftsched scheduler`` nodes, a ``raftsched worker``, one ``raftsched webserver``.

- A TaskFlow DAG with a ``@task.branch``: the branch skips the task it does not follow (and
  what comes after it, by trigger rule), a join with ``none_failed_min_one_success`` runs; a
  ``@task.bash`` that exits 99 and a ``BashTask`` with ``skip_on_exit_code=3`` end SKIPPED;
  return values reach downstream arguments and show in the REST API, in the DB rows and on
  the task page.
- Failover: a task returns a value; the leader is killed (kill -9) after that value committed
  and before the downstream task may run (it also waits on a gate task that polls a file the
  test creates only after the kill); the downstream task, leased through the new leader, gets
  the value.
- A return value that holds a variable the task declared is ``***`` in the REST API, the DB
  row, the task page and the downstream task's argument; its clear text is in no file.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from harness import wait_for
from test_rest_api import _database
from webstack import WebStack

from raftsched.store import queries

pytestmark = pytest.mark.slow

BRANCH_DAG = """
from raftsched import BashTask, dag, task


@dag(schedule=None)
def tf_branch():
    @task
    def count() -> int:
        return 6

    @task.branch
    def choose(n: int) -> str:
        return "big" if n > 5 else "small"

    @task
    def big(n: int) -> str:
        return f"big:{n}"

    @task
    def small() -> None:
        print("never")

    @task.bash
    def bash_skip(n: int) -> str:
        return f"echo n={n}; exit 99"

    @task
    def after_skip() -> None:
        print("never")

    n = count()
    big_result = big(n)
    small_result = small()
    choose(n) >> [big_result, small_result]
    join = BashTask("join", command="echo joined", trigger_rule="none_failed_min_one_success")
    [big_result, small_result] >> join
    small_result >> BashTask("after_small", command="echo never")
    bash_skip(n) >> after_skip()
    BashTask("classic_skip", command="echo skipping; exit 3", skip_on_exit_code=3)


tf_branch()
"""

FAILOVER_DAG = """
from pathlib import Path

from raftsched import BashTask, dag, task

OUT = Path({out!r})


@dag(schedule=None)
def tf_failover():
    @task
    def produce() -> dict:
        return {{"token": "tok-77", "n": 3}}

    @task
    def consume(token: str, n: int) -> str:
        OUT.write_text(f"{{token}}:{{n}}")
        return f"{{token}}x{{n}}"

    value = produce()
    gate = BashTask("gate", command="while [ ! -f {gate} ]; do sleep 0.1; done")
    gate >> consume(value["token"], value["n"])


tf_failover()
"""


SECRET_DAG = """
from raftsched import dag, task
from raftsched.secrets import get_variable


@dag(schedule=None)
def tf_secret():
    @task(secrets=["XCOM_TOKEN"])
    def leak() -> dict:
        return {"token": get_variable("XCOM_TOKEN"), "n": 1}

    @task
    def echo(token: str) -> str:
        return f"got {token}"

    echo(leak()["token"])


tf_secret()
"""
XCOM_TOKEN = f"xcom-{secrets.token_hex(8)}"


def _tasks(stack: WebStack, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    status, page = stack.rest("GET", f"/dags/{dag_id}/runs/{run_id}/task-instances")
    assert status == 200, page
    return {ti["task_id"]: ti for ti in page["task_instances"]}


def _finished(stack: WebStack, dag_id: str, run_id: str, timeout: float = 60) -> str:
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


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebStack]:
    workdir: Path = tmp_path_factory.mktemp(f"taskflow-{request.param}")
    failover = FAILOVER_DAG.format(out=str(workdir / "out"), gate=str(workdir / "gate"))
    dags = {"branch.py": BRANCH_DAG, "failover.py": failover, "secret.py": SECRET_DAG}
    config = {"secrets": {"fernet_key": Fernet.generate_key().decode()}}
    with (
        _database(request.param, workdir) as url,
        WebStack(workdir, url, webservers=1, use_nginx=False, dags=dags, config=config) as web,
    ):
        web.start()
        wait_for(
            lambda: all(
                web.rest("GET", f"/dags/{d}")[0] == 200
                for d in ("tf_branch", "tf_failover", "tf_secret")
            ),
            timeout=60,
            what="the TaskFlow DAGs registered",
            interval=0.3,
        )
        yield web


def test_taskflow_branches_skips_and_a_value_across_a_leader_kill(stack: WebStack) -> None:
    """Both runs at once (one cluster start per backend, the two runs overlap)."""
    cluster = stack.cluster
    for dag_id, run_id in (("tf_failover", "f1"), ("tf_branch", "b1")):
        done = stack.cli("dags", "trigger", dag_id, "--run-id", run_id)
        assert done.returncode == 0, done.stderr

    # failover: produce's value committed, consume waits on the gate; kill -9 the leader
    wait_for(
        lambda: (lambda t: t["produce"]["state"] == "success" and t["gate"]["state"] == "running")(
            _tasks(stack, "tf_failover", "f1")
        ),
        timeout=60,
        what="produce succeeded while the gate runs",
        interval=0.2,
    )
    leader = cluster.wait_leader()
    cluster.kill(leader)
    try:
        cluster.wait_leader(exclude={leader})
        (stack.workdir / "gate").touch()  # consume may run now: leased by the new leader
        assert _finished(stack, "tf_failover", "f1", timeout=60) == "success"
        assert (stack.workdir / "out").read_text() == "tok-77:3"
        assert _tasks(stack, "tf_failover", "f1")["consume"]["result_json"] == '"tok-77x3"'
    finally:
        cluster.start_node(leader)

    # branches and skips
    state = _finished(stack, "tf_branch", "b1")
    tasks = _tasks(stack, "tf_branch", "b1")
    states = {task_id: ti["state"] for task_id, ti in tasks.items()}
    assert states == {
        "count": "success",
        "choose": "success",
        "big": "success",
        "small": "skipped",  # the branch did not follow it
        "after_small": "skipped",  # all_success with a skipped upstream
        "join": "success",  # none_failed_min_one_success
        "bash_skip": "skipped",  # @task.bash exit 99
        "after_skip": "skipped",
        "classic_skip": "skipped",  # BashTask skip_on_exit_code=3
    }, states
    assert state == "success"
    assert tasks["count"]["result_json"] == "6"
    assert tasks["choose"]["result_json"] == '"big"'
    assert tasks["big"]["result_json"] == '"big:6"'  # 6 came from count's return value
    assert tasks["classic_skip"]["exit_code"] == 3

    # the DB keeps the value with the attempt's row
    def kept() -> str | None:
        rows = queries.list_task_instances(stack.cluster.engine, "tf_branch", "b1", task_id="big")
        return rows[-1].result_json if rows and rows[-1].state == "success" else None

    assert wait_for(kept, timeout=30, what="big's row in the DB", interval=0.3) == '"big:6"'

    # the task page shows it
    status, _, page = stack.login().get("/dags/tf_branch/runs/b1/tasks/big")
    assert status == 200
    assert "Return value (XCom)" in page and '"big:6"' in html.unescape(page)


def test_a_return_value_that_holds_a_secret_is_masked_everywhere(stack: WebStack) -> None:
    done = stack.cli("variables", "set", "XCOM_TOKEN", "--stdin", stdin=XCOM_TOKEN)
    assert done.returncode == 0, done.stderr
    done = stack.cli("dags", "trigger", "tf_secret", "--run-id", "s1")
    assert done.returncode == 0, done.stderr
    assert _finished(stack, "tf_secret", "s1") == "success"
    tasks = _tasks(stack, "tf_secret", "s1")
    assert tasks["leak"]["result_json"] == '{"token":"***","n":1}'
    assert tasks["echo"]["result_json"] == '"got ***"'  # what reached it was masked already

    def kept() -> str | None:
        rows = queries.list_task_instances(stack.cluster.engine, "tf_secret", "s1", task_id="leak")
        return rows[-1].result_json if rows and rows[-1].state == "success" else None

    assert wait_for(kept, timeout=30, what="leak's row", interval=0.3) == '{"token":"***","n":1}'
    status, _, page = stack.login().get("/dags/tf_secret/runs/s1/tasks/leak")
    assert status == 200 and '"token":"***"' in html.unescape(page)
    assert XCOM_TOKEN not in page
    for path in stack.workdir.rglob("*"):  # the Raft journals, snapshots, the DB, every log
        if path.is_file():
            assert XCOM_TOKEN.encode() not in path.read_bytes(), path
