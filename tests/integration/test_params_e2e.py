"""DAG params and templates end to end, on SQLite and on PostgreSQL.

Everything is real (:class:`webstack.WebStack`, one per backend, shared by the module): three
``raftsched scheduler`` nodes, a ``raftsched worker``, one ``raftsched webserver``. A DAG with
typed params and a templated command is triggered with a conf through the CLI; the worker runs
the rendered command (its log shows the output); a conf that breaks a param is refused through
the CLI and the REST API, naming the param, and creates no run; the task page shows the
rendered command, from the run's committed conf.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import wait_for
from test_rest_api import _database
from webstack import WebStack

pytestmark = pytest.mark.slow

DAG_ID = "params_e2e"
SOURCE = """
from raftsched import DAG, BashTask, Param

with DAG("params_e2e", schedule=None, params={
    "region": Param("eu", enum=["eu", "us"]),
    "days": Param(7, type="integer", minimum=1, maximum=31),
}):
    BashTask(
        "show",
        command=(
            "echo region={{ params.region }} days={{ params.days }} who={{ conf.who }}"
            " run={{ run_id }} day={{ ds }} env=$DAYS"
        ),
        env={"DAYS": "{{ params.days * 2 }}"},
    )
"""


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebStack]:
    workdir: Path = tmp_path_factory.mktemp(f"params-{request.param}")
    with (
        _database(request.param, workdir) as url,
        WebStack(workdir, url, webservers=1, use_nginx=False, dags={"p.py": SOURCE}) as web,
    ):
        web.start()
        wait_for(
            lambda: web.rest("GET", f"/dags/{DAG_ID}")[0] == 200,
            timeout=60,
            what=f"DAG {DAG_ID} registered",
            interval=0.3,
        )
        yield web


def test_a_triggered_conf_reaches_the_rendered_command(stack: WebStack) -> None:
    done = stack.cli(
        "dags",
        "trigger",
        DAG_ID,
        "--run-id",
        "p1",
        "--conf",
        '{"region": "us", "days": 3, "who": "ann"}',
    )
    assert done.returncode == 0, done.stderr

    def finished() -> str | None:
        status, run = stack.rest("GET", f"/dags/{DAG_ID}/runs/p1")
        return run["state"] if status == 200 and run["state"] in ("success", "failed") else None

    state = wait_for(finished, timeout=60, what="run p1 finished", interval=0.3)
    _, run = stack.rest("GET", f"/dags/{DAG_ID}/runs/p1")
    day = run["logical_date"][:10]

    def log_text() -> str | None:
        status, page = stack.rest("GET", f"/dags/{DAG_ID}/runs/p1/task-instances/show/logs")
        text = "".join(c["text"] for c in page["chunks"]) if status == 200 else ""
        return text if "region=" in text else None

    text = wait_for(log_text, timeout=30, what="the log of show", interval=0.3)
    assert state == "success", text
    assert f"region=us days=3 who=ann run=p1 day={day} env=6" in text

    # the task page shows what ran, rendered from the run's committed conf
    status, _, page = stack.login().get(f"/dags/{DAG_ID}/runs/p1/tasks/show")
    assert status == 200
    assert "Rendered" in page
    assert f"region=us days=3 who=ann run=p1 day={day} env=$DAYS" in page
    assert "<dt>DAYS</dt><dd><code>6</code>" in page
    # and so does `raftsched tasks render`
    done = stack.cli("tasks", "render", DAG_ID, "p1", "show")
    assert done.returncode == 0, done.stderr
    assert f"region=us days=3 who=ann run=p1 day={day} env=$DAYS" in done.stdout
    assert "env DAYS=6" in done.stdout


def test_a_conf_that_breaks_a_param_is_refused_naming_it(stack: WebStack) -> None:
    done = stack.cli("dags", "trigger", DAG_ID, "--run-id", "bad1", "--conf", '{"days": "three"}')
    assert done.returncode != 0
    assert "param 'days'" in done.stderr and "expected type integer" in done.stderr, done.stderr

    status, body = stack.rest("POST", f"/dags/{DAG_ID}/runs", {"conf": {"region": "mars"}})
    assert status == 400, body
    assert body["code"] == "INVALID_ARGUMENT"
    assert "param 'region'" in body["message"] and '"eu", "us"' in body["message"]

    # the web trigger form lists the params and shows the refusal
    web = stack.login()
    status, _, page = web.get(f"/dags/{DAG_ID}/trigger")
    assert status == 200 and "<h2>Params</h2>" in page and "<code>region</code>" in page
    status, _, page = web.post_form(f"/dags/{DAG_ID}/trigger", {"conf": '{"days": "three"}'})
    assert status == 400 and "days" in page and "expected type integer" in page, page[-2000:]

    status, body = stack.rest("POST", f"/dags/{DAG_ID}/runs", {"conf": {"days": 99}})
    assert status == 400 and "expected at most 31" in body["message"], body
    # nothing was proposed: no run of those
    status, runs = stack.rest("GET", f"/dags/{DAG_ID}/runs")
    assert status == 200
    assert "bad1" not in {r["run_id"] for r in runs["runs"]}
    assert all(r["conf"].get("days") != 99 for r in runs["runs"])
