"""A hostile task template on the task page and in ``raftsched tasks render``: refused with the
sandbox's reason, the page still served, and neither the webserver nor the CLI ever holds the
value (raftsched/dags/sandbox.py; render_task runs in a helper with a memory limit).

The page is the Flask test client against the web tests' real gRPC server; ``tasks render``
is a real ``raftsched`` process against the same server, its peak memory read from wait4.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from web_support import TOKEN, login

from raftsched.api.gen import dag_pb2

RUN = "scheduled__2024-01-01"
PAGE = f"/dags/etl_daily/runs/{RUN}/tasks/extract"
ATTACK = 'echo {{ "%0300000000d" % 1 }}'  # 1.1 GiB, built before the output check refused it
REASON = "a width of 300000000 is too large"


def _hostile_tasks(dag_id: str) -> list[dag_pb2.TaskDefinition]:
    return [dag_pb2.TaskDefinition(task_id="extract", kind="bash", command=ATTACK)]


def test_the_task_page_shows_the_reason(client, canned, monkeypatch) -> None:
    monkeypatch.setattr(canned, "tasks", _hostile_tasks)
    login(client, "viewer")
    page = client.get(PAGE)
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert 'id="rendered"' in text and REASON in text


def test_tasks_render_refuses_and_stays_small(canned, monkeypatch, _server, tmp_path) -> None:
    monkeypatch.setattr(canned, "tasks", _hostile_tasks)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTSCHED")}
    env["RAFTSCHED_HOME"] = str(tmp_path)
    argv = [sys.executable, "-m", "raftsched", "tasks", "render", "etl_daily", RUN, "extract"]
    argv += ["--server", _server[1], "--token", TOKEN]
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr)
    killer = threading.Timer(120, process.kill)  # bounded: wait4 itself has no timeout
    killer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)  # this process's own peak, not the helper's
    finally:
        killer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 1, (out.read_text(), err.read_text())
    assert REASON in err.read_text() and "template error in command" in err.read_text()
    # The attack builds 1.1 GiB unbounded; the process itself (imports, the airflow layer) and a
    # reaped render helper peak near 200 MB on a loaded host: 400 MB tells the two apart.
    assert usage.ru_maxrss // 1024 < 400, f"peak RSS {usage.ru_maxrss // 1024} MB"
