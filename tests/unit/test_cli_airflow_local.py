"""``raftsched dags test ID DATE`` and ``tasks test DAG TASK DATE`` as Airflow's commands, and
Airflow's environment secrets backend (``AIRFLOW_VAR_*``, ``AIRFLOW_CONN_*``) in them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

DAG = textwrap.dedent(
    """\
    from datetime import datetime, timedelta
    from raftsched.airflow import DAG
    from raftsched.airflow.hooks.base import BaseHook
    from raftsched.airflow.models import Variable
    from raftsched.airflow.operators.bash import BashOperator
    from raftsched.airflow.operators.python import PythonOperator

    def read(ds):
        cfg = Variable.get("cfg", deserialize_json=True)
        conn = BaseHook.get_connection("wh")
        print(f"ds={ds} n={cfg['n']} host={conn.host} login={conn.login}")
        print(f"leak={Variable.get('token')} pw={conn.password}")
        print(f"default={Variable.get('absent', default_var='dflt')}")

    with DAG("%s", schedule=%s, start_date=datetime(2024, 1, 1), catchup=False):
        first = BashOperator(task_id="first", bash_command="echo first-ran")
        second = PythonOperator(task_id="second", python_callable=read)
        first >> second
    """
)
ENV = {
    "AIRFLOW_VAR_CFG": json.dumps({"n": 7}),
    "AIRFLOW_VAR_TOKEN": "tok-s3cret-value",
    "AIRFLOW_CONN_WH": json.dumps(
        {"conn_type": "postgres", "host": "db.example", "login": "bob", "password": "pw-S3cret"}
    ),
}


def cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ENV}
    argv = [sys.executable, "-m", "raftsched", *args, "--folder", str(folder)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def write(folder: Path, dag_id: str, schedule: str) -> None:
    (folder / f"{dag_id}.py").write_text(DAG % (dag_id, schedule))


def test_dags_test_date_is_airflows_logical_date(tmp_path: Path) -> None:
    write(tmp_path, "delta", "timedelta(days=1)")  # interval start: the run fires a day later
    write(tmp_path, "crony", '"@daily"')  # Airflow 3: the scheduled time itself
    delta = cli(tmp_path, "dags", "test", "delta", "2024-03-01")
    assert delta.returncode == 0, delta.stdout + delta.stderr
    assert "run test__2024-03-02T00:00:00+00:00" in delta.stdout
    assert "ds=2024-03-01 n=7 host=db.example login=bob" in delta.stdout
    crony = cli(tmp_path, "dags", "test", "crony", "2024-03-01")
    assert crony.returncode == 0, crony.stdout + crony.stderr
    assert "ds=2024-03-01 " in crony.stdout and "test__2024-03-01T00:00:00" in crony.stdout
    same = cli(tmp_path, "dags", "test", "delta", "--logical-date", "2024-03-02T00:00:00")
    assert "ds=2024-03-01 " in same.stdout, same.stdout + same.stderr


def test_environment_values_are_read_undeclared_and_masked(tmp_path: Path) -> None:
    write(tmp_path, "crony", '"@daily"')
    done = cli(tmp_path, "dags", "test", "crony", "2024-03-01")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "leak=*** pw=***" in done.stdout
    assert "default=dflt" in done.stdout
    assert "tok-s3cret-value" not in done.stdout + done.stderr
    assert "pw-S3cret" not in done.stdout + done.stderr


def test_tasks_test_runs_one_task_only(tmp_path: Path) -> None:
    write(tmp_path, "crony", '"@daily"')
    done = cli(tmp_path, "tasks", "test", "crony", "second", "2024-03-01")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ds=2024-03-01 n=7" in done.stdout
    assert "first-ran" not in done.stdout
    assert done.stdout.splitlines()[-1] == "task second: success"
    unknown = cli(tmp_path, "tasks", "test", "crony", "nope")
    assert unknown.returncode == 1 and "has no task 'nope'" in unknown.stderr
    both = cli(tmp_path, "dags", "test", "crony", "2024-03-01", "--logical-date", "2024-03-01")
    assert both.returncode == 1 and "not both" in both.stderr
    bad = cli(tmp_path, "dags", "test", "crony", "yesterday")
    assert bad.returncode == 1 and "not an ISO-8601" in bad.stderr
