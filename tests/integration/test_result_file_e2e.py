"""A task that replaces its result file harms only its own attempt, on a real cluster with a
real ``raftsched worker``: a link to /dev/zero (the worker would read forever), a FIFO (it
would wait forever while its heartbeats keep the lease), an 8 GiB sparse file and a
directory each fail their attempt with a message saying what stands there, and the same
worker process goes on to run the tasks after them."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_harness import ApiCluster
from harness import wait_for

from raftsched.api.gen import common_pb2, dag_pb2

pytestmark = pytest.mark.slow

DAG_FILE = """
import os

from raftsched import DAG, PythonTask


def hostile(kind):
    path = os.environ["RAFTSCHED_RESULT_FILE"]
    if kind == "dev_zero":
        os.symlink("/dev/zero", path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "sparse":
        with open(path, "wb") as out:
            out.truncate(8 << 30)
    elif kind == "directory":
        os.mkdir(path)
    os._exit(0)  # as a task that writes no result itself: what it made stays


def plain(n):
    return {"n": n}


with DAG("result_files", schedule=None):
    hostiles = [
        PythonTask(kind, fn=hostile, kwargs={"kind": kind}, retries=0)
        for kind in ("dev_zero", "fifo", "sparse", "directory")
    ]
    hostiles >> PythonTask("after", fn=plain, kwargs={"n": 2}, trigger_rule="all_done")
    PythonTask("beside", fn=plain, kwargs={"n": 1})
"""

SAID = {
    "dev_zero": "the result file is not a regular file (it is a symbolic link)",
    "fifo": "the result file is not a regular file (it is a FIFO)",
    "sparse": "the result file is too large: 8589934592 bytes",
    "directory": "the result file is not a regular file (it is a directory)",
}


def test_a_hostile_result_file_fails_its_attempt_and_the_worker_runs_on(
    tmp_path: Path, sqlite_url: str
) -> None:
    dags = {"result_files.py": DAG_FILE}
    with ApiCluster(tmp_path, sqlite_url, nodes=1, dags=dags) as cluster:
        cluster.start()
        wait_for(  # one node: no follower names it (wait_leader waits for one)
            lambda: (cluster.status(0) or {}).get("role") == "leader", timeout=60, what="a leader"
        )
        client = cluster.client()
        cluster.wait_dags(client, {"result_files"})
        worker = cluster.start_worker("w1")
        request = dag_pb2.TriggerDagRequest(dag_id="result_files")
        run_id = client.dags.TriggerDag(request).run.run_id
        cluster.wait_run(client, "result_files", run_id, timeout=120)
        tis = cluster.current(client, "result_files", run_id)
        for kind, said in SAID.items():
            ti = tis[kind]
            assert ti.state == common_pb2.TASK_STATE_FAILED, (kind, ti)
            assert ti.message.startswith(said), (kind, ti.message)
        for task_id, n in (("after", 2), ("beside", 1)):
            assert tis[task_id].state == common_pb2.TASK_STATE_SUCCESS, tis[task_id]
            assert tis[task_id].result_json == f'{{"n":{n}}}'
            assert tis[task_id].worker_id == "w1"
        assert worker.alive  # the same process all along
