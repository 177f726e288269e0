"""A stale attempt's own write is refused by the recipes of docs/fencing-side-effects.md while
its retry's write stands (3 real nodes, two real workers, SQLite and PostgreSQL).

What is real and what is arranged: the victim worker's whole process tree (worker, task
supervisor, fork server, guard, the attempt) is frozen with SIGSTOP while the attempt waits to
write, as a frozen VM or host would be. The lease expires on the cluster, the retry runs on the
rescuer with the token of its own lease and writes. Then the attempt's process alone is thawed
first, as a host waking from a freeze may schedule it before its worker: this is the moment the
worker's self-fencing cannot cover (it is not running yet to kill anything), and the write it
makes with the older token is what the recipe refuses, in a table and in a file. The worker is
thawed last. Every wait is bounded; no wall-clock time is asserted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa
from api_harness import ApiCluster
from harness import wait_for

from raftsched import fencing
from raftsched.api.gen import common_pb2, dag_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

S = common_pb2
LEASE_TTL = 4.0
HEARTBEAT = 0.5
TABLE = "fenced_result"

DAG = """\
    import os
    import time
    from datetime import datetime, timedelta
    from pathlib import Path

    import sqlalchemy as sa

    from raftsched import DAG, PythonTask, fencing

    MARK, GO, OUT, VERDICT, SINK = "@MARK@", "@GO@", "@OUT@", "@VERDICT@", "@SINK@"


    def publish(**_):
        token = fencing.current_token()
        tries = os.environ["RAFTSCHED_TRY_NUMBER"]
        with open(MARK, "a") as f:
            f.write(f"{tries} {os.getpid()} {token}\\n")
        while not os.path.exists(GO):
            time.sleep(0.05)
        in_file = fencing.write_file_fenced(Path(OUT), f"try {tries}\\n".encode(), token)
        engine = sa.create_engine(SINK)
        with engine.begin() as conn:
            in_table = fencing.upsert_fenced(conn, "fenced_result", "day", f"try {tries}", token)
        engine.dispose()
        with open(VERDICT, "a") as f:
            f.write(f"{tries} {in_table} {in_file}\\n")
        if not (in_table and in_file):
            raise RuntimeError(f"fenced out: token {token} is stale")


    with DAG("fenced", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        PythonTask("publish", fn=publish, retries=1, retry_delay=timedelta(0))
    """


def _lines(path: Path) -> dict[int, list[str]]:
    """try number -> the rest of its line (the latest one per try)."""
    out: dict[int, list[str]] = {}
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            first, *rest = line.split()
            out[int(first)] = rest
    return out


def _tree(root: int) -> list[int]:
    """``root`` and its descendants now (by the parent pid in /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(stat[1])
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return tree


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def test_a_stale_attempts_write_is_refused_and_its_retrys_stands(
    tmp_path: Path, db_url: str
) -> None:
    files = {name: tmp_path / f"{name}.txt" for name in ("mark", "go", "out", "verdict")}
    sink = db_url if db_url.startswith("postgresql") else f"sqlite:///{tmp_path / 'sink.db'}"
    engine = sa.create_engine(sink)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {TABLE} (key TEXT PRIMARY KEY, value TEXT, fencing_token BIGINT)"
        )
    text = textwrap.dedent(DAG).replace("@SINK@", sink)
    for name, path in files.items():
        text = text.replace(f"@{name.upper()}@", str(path))
    frozen: list[int] = []
    with ApiCluster(
        tmp_path,
        db_url,
        dags={"fenced.py": text},
        lease_ttl=LEASE_TTL,
        heartbeat_interval=HEARTBEAT,
    ) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {"fenced"})
        victim = cluster.start_worker("victim", concurrency=1)
        run_id = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="fenced")).run.run_id
        first = cluster.wait_task(
            client, "fenced", run_id, "publish", lambda ti: ti.worker_id == "victim"
        )
        mark = wait_for(lambda: _lines(files["mark"]).get(1), timeout=30, what="attempt 1")
        stale_pid, stale_token = int(mark[0]), int(mark[1])
        assert stale_token == first.lease_token > 0
        try:
            assert victim.pid is not None
            frozen = _tree(victim.pid)
            assert stale_pid in frozen
            _signal_all(frozen, signal.SIGSTOP)
            cluster.start_worker("rescuer", concurrency=1)
            mark = wait_for(lambda: _lines(files["mark"]).get(2), timeout=60, what="the retry")
            fresh_token = int(mark[1])
            assert fresh_token > stale_token
            files["go"].touch()
            done = cluster.wait_task(
                client, "fenced", run_id, "publish", lambda ti: ti.state == S.TASK_STATE_SUCCESS
            )
            assert (done.try_number, done.worker_id, done.lease_token) == (
                2,
                "rescuer",
                fresh_token,
            )
            assert _lines(files["verdict"]) == {2: ["True", "True"]}
            # The stale attempt wakes before its worker: it writes with its old token.
            os.kill(stale_pid, signal.SIGCONT)
            verdict = wait_for(lambda: _lines(files["verdict"]).get(1), timeout=30, what="try 1")
        finally:
            _signal_all(frozen, signal.SIGCONT)
        assert verdict == ["False", "False"]  # refused by the table and by the file
        with engine.connect() as conn:
            row = conn.exec_driver_sql(f"SELECT value, fencing_token FROM {TABLE}").one()
        assert tuple(row) == ("try 2", fresh_token)
        assert fencing.read_file_token(files["out"]) == fresh_token
        assert fencing.read_file_data(files["out"]) == b"try 2\n"
        ti = cluster.current(client, "fenced", run_id)["publish"]
        assert (ti.state, ti.try_number, ti.worker_id) == (S.TASK_STATE_SUCCESS, 2, "rescuer")
    engine.dispose()
