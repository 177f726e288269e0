"""Airflow's variable and connection files, and Airflow's names for them in task code, end to
end: three real scheduler nodes, a real worker, the CLI as subprocesses.

``variables import`` / ``connections import`` take Airflow's JSON shapes (a JSON variable is
stored as its JSON text, a connection object becomes a URI), refuse a bad file whole (nothing
written) and an operator token; ``export`` writes them back in the same shapes (mode 0600). A
task of an Airflow DAG reads the imported JSON variable with ``Variable.get(...,
deserialize_json=True)``, the imported connection with ``BaseHook.get_connection``, and an
``AIRFLOW_VAR_*`` of its worker's environment that it never declared; each value is ***
in its log.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from api_harness import ADMIN, OPERATOR, ApiCluster
from cryptography.fernet import Fernet
from harness import child_env

from raftsched.api.gen import common_pb2, dag_pb2
from raftsched.store import queries

pytestmark = pytest.mark.slow

PASSWORD = f"pw-{secrets.token_hex(8)}"
ENV_VALUE = f"env-{secrets.token_hex(8)}"
VARIABLES = {"plain": "some text", "cfg": {"n": 7, "tags": ["a", "b"]}}
CONNECTIONS = {
    "wh": {
        "conn_type": "postgres",
        "host": "db.example",
        "login": "bob",
        "password": PASSWORD,
        "schema": "app",
        "port": 5432,
        "extra": {"sslmode": "require"},
    },
    "hook": "https://hooks.example/services/T0",
}
DAG = textwrap.dedent(
    """\
    from raftsched.airflow import DAG
    from raftsched.airflow.hooks.base import BaseHook
    from raftsched.airflow.models import Variable
    from raftsched.airflow.operators.python import PythonOperator

    def read():
        cfg = Variable.get("cfg", deserialize_json=True)
        conn = BaseHook.get_connection("wh")
        print(f"n={cfg['n']} tags={cfg['tags']} host={conn.host} port={conn.port}")
        print(f"extra={conn.extra_dejson} password={conn.password}")
        print(f"undeclared={Variable.get('from_env')}")

    with DAG("af_secrets", schedule=None):
        PythonOperator(task_id="read", python_callable=read, secrets=["cfg"], connections=["wh"])
    """
)


def test_import_export_and_airflow_reads(tmp_path: Path, sqlite_url: str) -> None:
    config = {"secrets": {"fernet_key": Fernet.generate_key().decode()}}
    dags = {"af_secrets.py": DAG}
    with ApiCluster(tmp_path / "cluster", sqlite_url, dags=dags, config=config) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()

        def cli(*args: str, token: str = ADMIN, stdin: str = "") -> subprocess.CompletedProcess:
            argv = [sys.executable, "-m", "raftsched", *args, "--config", str(cluster.config_path)]
            env = {**child_env(), "RAFTSCHED_TOKEN": token}
            return subprocess.run(
                argv, input=stdin, capture_output=True, text=True, timeout=60, env=env
            )

        (tmp_path / "vars.json").write_text(json.dumps(VARIABLES))
        (tmp_path / "conns.json").write_text(json.dumps(CONNECTIONS))
        # a bad file changes nothing, and says which entry (never its value)
        bad = {"ok_name": "x", "bad name": "y"}
        refused = cli("variables", "import", "-", stdin=json.dumps(bad))
        assert refused.returncode == 1 and "'bad name'" in refused.stderr, refused.stderr
        assert "nothing imported" in refused.stderr
        bad_conn = {"c1": {"conn_type": "http", "host": "h", "pasword": PASSWORD}}
        refused = cli("connections", "import", "-", stdin=json.dumps(bad_conn))
        assert refused.returncode == 1 and "pasword" in refused.stderr
        assert PASSWORD not in refused.stderr + refused.stdout
        operator = cli("variables", "import", str(tmp_path / "vars.json"), token=OPERATOR)
        assert operator.returncode != 0 and "admin" in operator.stderr
        listed = cli("variables", "list")
        assert listed.returncode == 0 and "ok_name" not in listed.stdout  # nothing was set

        done = cli("variables", "import", str(tmp_path / "vars.json"))
        assert done.returncode == 0 and "2 set" in done.stdout, done.stdout + done.stderr
        done = cli("connections", "import", str(tmp_path / "conns.json"))
        assert done.returncode == 0 and "2 set" in done.stdout, done.stdout + done.stderr
        again = cli("connections", "import", str(tmp_path / "conns.json"))
        assert "2 skipped" in again.stdout  # Airflow's default: existing connections stay
        failing = cli("variables", "import", str(tmp_path / "vars.json"), "-a", "fail")
        assert failing.returncode == 1 and "exist already" in failing.stderr

        out = tmp_path / "out_vars.json"
        assert cli("variables", "export", str(out)).returncode == 0
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
        assert json.loads(out.read_text()) == VARIABLES
        conns = json.loads(cli("connections", "export").stdout)
        assert conns["wh"] == {
            "conn_type": "postgres",
            "host": "db.example",
            "login": "bob",
            "password": PASSWORD,
            "schema": "app",
            "port": 5432,
            "extra": json.dumps({"sslmode": "require"}),
            "description": None,
        }
        uris = json.loads(cli("connections", "export", "--serialization-format", "uri").stdout)
        assert uris["hook"] == CONNECTIONS["hook"]
        assert cli("connections", "export", token=OPERATOR).returncode != 0

        # the task reads them under Airflow's names; the worker's AIRFLOW_VAR_* undeclared
        cluster.wait_dags(client, {"af_secrets"})
        cluster.start_worker("w1", extra_env={"AIRFLOW_VAR_FROM_ENV": ENV_VALUE})
        run_id = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="af_secrets")).run.run_id
        run = cluster.wait_run(client, "af_secrets", run_id)
        cluster.wait_caught_up(timeout=60)
        log = "".join(
            c.text for c in queries.read_log(cluster.engine, "af_secrets", run_id, "read", 1)
        )
        assert run.state == common_pb2.RUN_STATE_SUCCESS, log
        assert "n=7 tags=['a', 'b'] host=db.example port=5432" in log
        assert "extra={'sslmode': 'require'} password=***" in log
        assert "undeclared=***" in log
        assert PASSWORD not in log and ENV_VALUE not in log
