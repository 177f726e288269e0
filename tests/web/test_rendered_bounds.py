"""A hostile task template on the task page and in ``raftsched tasks render``: refused with the
sandbox's reason, the page still served, and neither the webserver nor the CLI ever holds the
value (raftsched/dags/sandbox.py; render_task runs in a helper with a memory limit).

The page is the Flask test client against the web tests' real gRPC server; ``tasks render``
is a real ``raftsched`` process against the same server, its peak memory measured by itself.
"""

from __future__ import annotations

import os
import subprocess
import sys

from web_support import TOKEN, login

from raftsched.api.gen import dag_pb2

RUN = "scheduled__2024-01-01"
PAGE = f"/dags/etl_daily/runs/{RUN}/tasks/extract"
ATTACK = 'echo {{ "%0300000000d" % 1 }}'  # 1.1 GiB, built before the output check refused it
REASON = "a width of 300000000 is too large"

# `raftsched ARGS` that writes its peak RSS in MB to argv[1] as it exits: its own VmHWM and its
# reaped render helper's ru_maxrss. Not wait4's ru_maxrss: that counts the memory of the process
# the CLI was forked from (this test runner, hundreds of MB late in a run) up to its exec.
MEASURED_CLI = """
import resource, sys
from raftsched.cli.main import main
peak_file = sys.argv.pop(1)
try:
    code = main(sys.argv[1:])
finally:
    with open("/proc/self/status") as status:
        hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    peak = max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) // 1024
    with open(peak_file, "w") as out:
        out.write(str(peak))
sys.exit(code)
"""


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
    args = ["tasks", "render", "etl_daily", RUN, "extract", "--server", _server[1]]
    args += ["--token", TOKEN]
    peak_file = tmp_path / "peak"
    argv = [sys.executable, "-c", MEASURED_CLI, str(peak_file), *args]
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.run(argv, env=env, stdout=stdout, stderr=stderr, timeout=120)
    assert process.returncode == 1, (out.read_text(), err.read_text())
    assert REASON in err.read_text() and "template error in command" in err.read_text()
    # The attack builds 1.1 GiB unbounded; the process itself (imports, the airflow layer) and a
    # reaped render helper peak near 200 MB on a loaded host: 400 MB tells the two apart.
    peak_mb = int(peak_file.read_text())
    assert peak_mb < 400, f"peak RSS {peak_mb} MB"
