"""``raftsched dags test``: one run of a DAG here, task by task, with no cluster."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

DAG = textwrap.dedent(
    """\
    from datetime import datetime, timezone
    from raftsched import DAG, BashTask, PythonTask

    def hello(name="x"):
        print(f"hello {name}")

    with DAG("t_dag", schedule="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
        a = BashTask("a", command='echo "ld=$RAFTSCHED_LOGICAL_DATE conf=$RAFTSCHED_CONF"')
        b = PythonTask("b", fn=hello, kwargs={"name": "raft"})
        c = BashTask("c", command="%s", retries=1)
        d = BashTask("d", command="echo after", queue="gpu")  # dags test ignores queues
        a >> b >> c >> d
    """
)


def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "raftsched", "dags", "test", "t_dag", "--folder", str(folder)]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120)


def test_a_run_that_succeeds_prints_each_task_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / "d.py").write_text(DAG % "echo fine")
    done = run(tmp_path, "--logical-date", "2026-02-03T00:00:00", "--conf", '{"k": 1}')
    assert done.returncode == 0, done.stdout + done.stderr
    assert '[a] ld=2026-02-03T00:00:00+00:00 conf={"k": 1}' in done.stdout
    assert "[b] hello raft" in done.stdout
    assert "[d] after" in done.stdout
    assert ": success" in done.stdout.splitlines()[-1]


def test_a_failing_task_is_retried_its_downstream_not_run_and_the_exit_is_1(
    tmp_path: Path,
) -> None:
    (tmp_path / "d.py").write_text(DAG % "echo broken >&2; exit 3")
    done = run(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "--- c: try 2 of 2" in done.stdout
    assert "--- d: upstream_failed" in done.stdout
    assert "[d] after" not in done.stdout
    assert "[c] broken" in done.stderr


def test_unknown_dag_and_bad_conf_are_clear_errors(tmp_path: Path) -> None:
    (tmp_path / "d.py").write_text(DAG % "true")
    missing = subprocess.run(
        [sys.executable, "-m", "raftsched", "dags", "test", "nope", "--folder", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1 and "`raftsched dags parse`" in missing.stderr
    bad = run(tmp_path, "--conf", "[1, 2]")
    assert bad.returncode == 1 and "JSON object" in bad.stderr


TASKFLOW = textwrap.dedent(
    """\
    from raftsched import BashTask, dag, task

    @dag(schedule=None)
    def tf_dag():
        @task
        def extract():
            return {"rows": [1, 2, 3]}

        @task.branch
        def route(rows):
            return "big" if sum(rows) > 5 else "small"

        @task
        def big(rows):
            return len(rows)

        @task
        def small():
            print("never")

        @task
        def too_big():
            return "x" * 70000

        rows = extract()["rows"]
        route(rows) >> [big(rows), small()]
        BashTask("skips", command="exit 3", skip_on_exit_code=3)
        too_big()

    tf_dag()
    """
)


def test_taskflow_values_branches_and_skips(tmp_path: Path) -> None:
    (tmp_path / "tf.py").write_text(TASKFLOW)
    argv = [sys.executable, "-m", "raftsched", "dags", "test", "tf_dag", "--folder", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert '--- extract: xcom {"rows":[1,2,3]}' in out, out + done.stderr
    assert '--- route: xcom "big"' in out
    assert "--- big: xcom 3" in out  # rows[...] reached big as its argument
    assert "--- small: skipped (branch route)" in out
    assert "--- skips: skipped" in out
    # a return value past 64 KiB fails the attempt, saying the bound and what to do
    assert "--- too_big: failed" in out and "the limit is 65536 bytes" in out
    assert "keep bulk data in files" in out
    assert done.returncode == 1
