"""Variables and connections end to end: three real scheduler nodes, a real worker.

A variable set through the CLI and a connection added through the client reach a BashTask and a
PythonTask that declare them (they write digests of what they saw to files); the task logs in
the DB show ``***`` where the tasks printed the values; and no answer (GetDag, ListSecrets,
GetSecret without reveal), no /metrics page, no file of the test (the SQLite DB, the Raft
journals and snapshots, every node's and the worker's log) holds a value in clear text.
Roles: a viewer lists names only, an operator sees masked parts, only an admin reveals; a
worker gets values only for a lease it holds.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import textwrap
import urllib.request
from contextlib import redirect_stdout
from pathlib import Path

import grpc
import pytest
from api_harness import OPERATOR, VIEWER, WORKER, ApiCluster
from cryptography.fernet import Fernet

from raftsched.addresses import ADMIN_PORT_OFFSET
from raftsched.api.client import ApiError
from raftsched.api.gen import common_pb2, dag_pb2, secret_pb2
from raftsched.cli.main import main as cli
from raftsched.store import queries

pytestmark = pytest.mark.slow

VALUE = f"var-{secrets.token_hex(8)}"
PASSWORD = f"pw-{secrets.token_hex(8)}"
URI = f"postgresql://bob:{PASSWORD}@db.example:5432/app?sslmode=require"


def _dag(seen: Path) -> str:
    return textwrap.dedent(
        f"""\
        import hashlib
        from pathlib import Path

        from raftsched import DAG, BashTask, PythonTask
        from raftsched.secrets import get_connection, get_variable

        SEEN = Path({str(seen)!r})


        def use() -> None:
            conn = get_connection("warehouse")
            print("python sees", get_variable("MY_VAR"), "and password", conn.password)
            for name, text in (("py_var", get_variable("MY_VAR")), ("py_pw", conn.password)):
                (SEEN / name).write_text(hashlib.sha256(text.encode()).hexdigest())


        with DAG("secret_user", schedule=None):
            bash = BashTask(
                "bash",
                command=(
                    'echo "bash sees $RAFTSCHED_VAR_MY_VAR"; echo "uri $RAFTSCHED_CONN_warehouse";'
                    ' printf %s "$RAFTSCHED_VAR_MY_VAR" | sha256sum | cut -c1-64 > {seen}/bash_var'
                ),
                secrets=["MY_VAR"],
                connections=["warehouse"],
            )
            py = PythonTask("py", fn=use, secrets=["MY_VAR"], connections=["warehouse"])
            bash >> py
        """
    )


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _code(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(ApiError) as err:
        call()
    return err.value.code


def test_values_reach_tasks_and_nowhere_else(tmp_path: Path, sqlite_url: str) -> None:
    seen = tmp_path / "seen"
    seen.mkdir()
    key = Fernet.generate_key().decode()
    config = {"secrets": {"fernet_key": key}}
    dags = {"secret_user.py": _dag(seen)}
    with ApiCluster(tmp_path / "cluster", sqlite_url, dags=dags, config=config) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {"secret_user"})

        base = ["--config", str(cluster.config_path), "--token", "admin-token-0123456789"]
        with redirect_stdout(io.StringIO()) as out:
            assert cli([*base, "variables", "set", "MY_VAR", VALUE]) == 0
        assert "set" in out.getvalue() and VALUE not in out.getvalue()
        client.secrets.SetSecret(
            secret_pb2.SetSecretRequest(kind="connection", key="warehouse", value=URI)
        )
        cluster.start_worker("w1")
        run_id = client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="secret_user")).run.run_id
        run = cluster.wait_run(client, "secret_user", run_id)
        assert run.state == common_pb2.RUN_STATE_SUCCESS

        # the tasks saw the values
        assert (seen / "bash_var").read_text().strip() == _sha(VALUE)
        assert (seen / "py_var").read_text() == _sha(VALUE)
        assert (seen / "py_pw").read_text() == _sha(PASSWORD)
        # their logs, as the DB keeps them, show *** instead
        cluster.wait_caught_up(timeout=60)
        logs = {
            task: "".join(
                c.text for c in queries.read_log(cluster.engine, "secret_user", run_id, task, 1)
            )
            for task in ("bash", "py")
        }
        assert "bash sees ***" in logs["bash"] and "uri ***" in logs["bash"]
        assert "python sees *** and password ***" in logs["py"]

        # answers: names and masked parts only, the value to an admin who asks
        answers = [
            client.dags.GetDag(dag_pb2.GetDagRequest(dag_id="secret_user")),
            client.secrets.ListSecrets(secret_pb2.ListSecretsRequest(kind="variable")),
            client.secrets.ListSecrets(secret_pb2.ListSecretsRequest(kind="connection")),
        ]
        viewer, operator = cluster.client(VIEWER), cluster.client(OPERATOR)
        listed = viewer.secrets.ListSecrets(secret_pb2.ListSecretsRequest(kind="variable"))
        assert [s.key for s in listed.secrets] == ["MY_VAR"]
        get = secret_pb2.GetSecretRequest(kind="connection", key="warehouse")
        masked = operator.secrets.GetSecret(get)
        assert masked.masked == "postgresql://bob:***@db.example:5432/app?sslmode=require"
        assert masked.connection.host == "db.example" and masked.connection.has_password
        answers += [listed, masked]
        reveal = secret_pb2.GetSecretRequest(kind="connection", key="warehouse", reveal=True)
        assert (
            _code(lambda: operator.secrets.GetSecret(reveal)) == grpc.StatusCode.PERMISSION_DENIED
        )
        assert _code(lambda: viewer.secrets.GetSecret(get)) == grpc.StatusCode.PERMISSION_DENIED
        assert client.secrets.GetSecret(reveal).value == URI
        shown = ["--config", str(cluster.config_path), "--token", OPERATOR, "-o", "json"]
        with redirect_stdout(io.StringIO()) as out:
            assert cli([*shown, "connections", "get", "warehouse"]) == 0
        parts = json.loads(out.getvalue())
        assert (parts["host"], parts["port"], parts["password"]) == ("db.example", 5432, "***")
        assert PASSWORD not in out.getvalue()
        for answer in answers:
            data = answer.SerializeToString()
            assert VALUE.encode() not in data and PASSWORD.encode() not in data
        # a worker token gets nothing for a lease it does not hold
        stale = secret_pb2.ResolveSecretsRequest(
            key=common_pb2.TaskKey(dag_id="secret_user", run_id=run_id, task_id="bash"),
            token=1,
            worker_id="w1",
            variables=["MY_VAR"],
        )
        worker = cluster.client(WORKER)
        assert (
            _code(lambda: worker.secrets.ResolveSecrets(stale))
            == grpc.StatusCode.FAILED_PRECONDITION
        )
        host, port = cluster.addresses[0].rsplit(":", 1)
        metrics_url = f"http://{host}:{int(port) + ADMIN_PORT_OFFSET}/metrics"
        with urllib.request.urlopen(metrics_url, timeout=10) as page:
            metrics = page.read()
        assert VALUE.encode() not in metrics and PASSWORD.encode() not in metrics

    # every file the cluster wrote: the DB, the Raft journals and snapshots, all the logs
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    journals = [p for p in files if "data" in p.parts and b"MY_VAR" in p.read_bytes()]
    assert journals, "no Raft journal holds the SetSecret entry: the grep looked in vain"
    assert any(p.suffix == ".db" for p in files)
    for path in files:
        data = path.read_bytes()
        for plain in (VALUE, PASSWORD):
            assert plain.encode() not in data, f"{plain} in {path}"
