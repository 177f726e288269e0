"""Variables and connections end to end: three real scheduler nodes, a real worker.

A variable set through the CLI and a connection added through the client reach a BashTask and a
PythonTask that declare them (they write digests of what they saw to files); the task logs in
the DB show ``***`` where the tasks printed the values (a webhook connection's token alone
too), and so does the value the PythonTask returns (in ListTaskInstances and the DB row); no
answer (GetDag, ListSecrets, GetSecret without reveal), no /metrics page, no file of the test
(the SQLite DB, the Raft journals and snapshots, every node's and the worker's log) holds a
value in clear text. Roles: a viewer lists names only, an operator sees a connection's shape
(every credential part ***: password, path past its first segment, query values), only an
admin reveals; a worker gets values only for a lease it holds.
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
from harness import wait_for

from raftsched.addresses import ADMIN_PORT_OFFSET
from raftsched.api.gen import cluster_pb2, common_pb2, dag_pb2, secret_pb2
from raftsched.cli.main import main as cli
from raftsched.core.versions import RELEASE
from raftsched.errors import ApiError
from raftsched.store import queries

pytestmark = pytest.mark.slow

VALUE = f"var-{secrets.token_hex(8)}"
PASSWORD = f"pw-{secrets.token_hex(8)}"
URI = f"postgresql://bob:{PASSWORD}@db.example:5432/app?sslmode=require"
HOOK_TOKEN = f"hook-{secrets.token_hex(8)}"
API_KEY = f"key-{secrets.token_hex(8)}"
HOOK = f"https://hooks.example/services/T0AB/{HOOK_TOKEN}?api_key={API_KEY}&verbose=true"
# read on demand, undeclared (tests/fixtures/airflow_dags/on_demand.py)
OD_VALUE = f"odv-{secrets.token_hex(8)}"
OD_PASSWORD = f"odpw-{secrets.token_hex(8)}"
TEAM_VALUE = f"team-{secrets.token_hex(8)}"
PLAIN = (VALUE, PASSWORD, HOOK_TOKEN, API_KEY, OD_VALUE, OD_PASSWORD, TEAM_VALUE)
ON_DEMAND_DAG = Path(__file__).resolve().parents[1] / "fixtures" / "airflow_dags" / "on_demand.py"


def _dag(seen: Path) -> str:
    return textwrap.dedent(
        f"""\
        import hashlib
        from pathlib import Path

        from raftsched import DAG, BashTask, PythonTask
        from raftsched.secrets import get_connection, get_variable

        SEEN = Path({str(seen)!r})


        def use() -> dict:
            conn = get_connection("warehouse")
            print("python sees", get_variable("MY_VAR"), "and password", conn.password)
            for name, text in (("py_var", get_variable("MY_VAR")), ("py_pw", conn.password)):
                (SEEN / name).write_text(hashlib.sha256(text.encode()).hexdigest())
            hook = get_connection("alerts_hook")
            return {{
                "var": get_variable("MY_VAR"),
                "note": f"password {{conn.password}}",
                "hook": [hook.schema.rsplit("/", 1)[-1], hook.extra],
            }}


        with DAG("secret_user", schedule=None):
            bash = BashTask(
                "bash",
                command=(
                    'echo "bash sees $RAFTSCHED_VAR_MY_VAR"; echo "uri $RAFTSCHED_CONN_warehouse";'
                    ' printf %s "$RAFTSCHED_VAR_MY_VAR" | sha256sum | cut -c1-64 > {seen}/bash_var;'
                    ' h="${{RAFTSCHED_CONN_alerts_hook%%[?]*}}"; echo "hook ${{h##*/}}"'
                ),
                secrets=["MY_VAR"],
                connections=["warehouse", "alerts_hook"],
            )
            py = PythonTask(
                "py", fn=use, secrets=["MY_VAR"], connections=["warehouse", "alerts_hook"]
            )
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
    dags = {"secret_user.py": _dag(seen), "on_demand.py": ON_DEMAND_DAG.read_text()}
    with ApiCluster(tmp_path / "cluster", sqlite_url, dags=dags, config=config) as cluster:
        cluster.start()
        cluster.wait_leader()
        client = cluster.client()
        cluster.wait_dags(client, {"secret_user", "on_demand", "on_demand_other"})

        base = ["--config", str(cluster.config_path), "--token", "admin-token-0123456789"]
        with redirect_stdout(io.StringIO()) as out:
            assert cli([*base, "variables", "set", "MY_VAR", VALUE]) == 0
        assert "set" in out.getvalue() and VALUE not in out.getvalue()
        for conn_id, uri in (("warehouse", URI), ("alerts_hook", HOOK)):
            client.secrets.SetSecret(
                secret_pb2.SetSecretRequest(kind="connection", key=conn_id, value=uri)
            )
        cluster.start_worker("w1", token_in_env=True)  # a task's environment leaves it out
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
        assert "hook ***" in logs["bash"]  # a webhook's token alone, not only the whole URI
        assert "python sees *** and password ***" in logs["py"]
        # the return value too: in the state (the API), in the DB row
        returned = {
            "var": "***",
            "note": "password ***",
            "hook": ["***", "api_key=***&verbose=true"],
        }
        listed_tis = client.dags.ListTaskInstances(
            dag_pb2.ListTaskInstancesRequest(dag_id="secret_user", run_id=run_id)
        )
        py_ti = next(ti for ti in listed_tis.task_instances if ti.key.task_id == "py")
        assert json.loads(py_ti.result_json) == returned
        rows = queries.list_task_instances(cluster.engine, "secret_user", run_id, task_id="py")
        assert json.loads(rows[-1].result_json) == returned

        # answers: names and masked parts only, the value to an admin who asks
        answers = [
            listed_tis,
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
        # a webhook: its path past the first segment and its query values are credentials
        get_hook = secret_pb2.GetSecretRequest(kind="connection", key="alerts_hook")
        hook = operator.secrets.GetSecret(get_hook)
        assert hook.masked == "https://hooks.example/services/***?api_key=***&verbose=true"
        assert (hook.connection.host, hook.connection.schema, hook.connection.extra) == (
            "hooks.example",
            "services/***",
            "api_key=***&verbose=true",
        )
        answers += [listed, masked, hook, client.secrets.GetSecret(get_hook)]
        get_hook.reveal = True
        revealed = client.secrets.GetSecret(get_hook)  # an admin who asks sees it all
        assert (
            revealed.value == HOOK
            and revealed.connection.extra == f"api_key={API_KEY}&verbose=true"
        )
        assert revealed.connection.schema == f"services/T0AB/{HOOK_TOKEN}"
        assert (
            _code(lambda: operator.secrets.GetSecret(get_hook)) == grpc.StatusCode.PERMISSION_DENIED
        )
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
        with redirect_stdout(io.StringIO()) as out:
            assert cli([*shown, "connections", "get", "alerts_hook"]) == 0
        parts = json.loads(out.getvalue())
        assert (parts["schema"], parts["extra"]) == ("services/***", "api_key=***&verbose=true")
        assert HOOK_TOKEN not in out.getvalue() and API_KEY not in out.getvalue()
        for answer in answers:
            data = answer.SerializeToString()
            for plain in PLAIN:
                assert plain.encode() not in data, (plain, answer)
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
        _read_on_demand(cluster, client, seen)
        host, port = cluster.addresses[0].rsplit(":", 1)
        metrics_url = f"http://{host}:{int(port) + ADMIN_PORT_OFFSET}/metrics"
        with urllib.request.urlopen(metrics_url, timeout=10) as page:
            metrics = page.read()
        assert not any(plain.encode() in metrics for plain in PLAIN)

    # every file the cluster wrote: the DB, the Raft journals and snapshots, all the logs
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    journals = [p for p in files if "data" in p.parts and b"MY_VAR" in p.read_bytes()]
    assert journals, "no Raft journal holds the SetSecret entry: the grep looked in vain"
    assert any(p.suffix == ".db" for p in files)
    for path in files:
        data = path.read_bytes()
        for plain in PLAIN:
            assert plain.encode() not in data, f"{plain} in {path}"


def _read_on_demand(cluster: ApiCluster, client, seen: Path) -> None:  # type: ignore[no-untyped-def]
    """Airflow code reads what it never declared: the values come through the worker with the
    attempt's lease, masked in the task's log and return value, each read in the audit log; a
    variable restricted to DAG on_demand fails DAG on_demand_other's task, saying so; the task
    holds no token."""
    wait_for(  # a restriction and an on-demand read are new in release 3
        lambda: all(
            (st or {}).get("cluster_version") == RELEASE for st in cluster.statuses().values()
        ),
        timeout=30,
        what="the cluster version of this release",
    )
    base = ["--config", str(cluster.config_path), "--token", "admin-token-0123456789"]
    with redirect_stdout(io.StringIO()):
        assert cli([*base, "variables", "set", "OD_VAR", OD_VALUE]) == 0
        assert cli([*base, "variables", "set", "OD_JSON", '{"limit": 3}']) == 0
        assert cli([*base, "variables", "set", "TEAM_VAR", TEAM_VALUE, "--dags", "on_demand"]) == 0
        uri = f"postgresql://od:{OD_PASSWORD}@od.example:5432/app"
        assert cli([*base, "connections", "add", "od_db", uri]) == 0
    with redirect_stdout(io.StringIO()) as out:
        assert cli([*base, "-o", "json", "variables", "list"]) == 0
    listed = {v["key"]: v["dags"] for v in json.loads(out.getvalue())["variables"]}
    assert listed["TEAM_VAR"] == "on_demand" and listed["OD_VAR"] == ""
    with redirect_stdout(io.StringIO()) as out:
        assert cli([*base, "-o", "json", "variables", "get", "TEAM_VAR"]) == 0
    assert json.loads(out.getvalue())["dags"] == ["on_demand"]

    conf = json.dumps({"out": str(seen)})
    trigger = dag_pb2.TriggerDagRequest(dag_id="on_demand", conf_json=conf)
    run_id = client.dags.TriggerDag(trigger).run.run_id
    other_id = client.dags.TriggerDag(
        dag_pb2.TriggerDagRequest(dag_id="on_demand_other")
    ).run.run_id
    assert cluster.wait_run(client, "on_demand", run_id).state == common_pb2.RUN_STATE_SUCCESS
    assert (
        cluster.wait_run(client, "on_demand_other", other_id).state == common_pb2.RUN_STATE_FAILED
    )

    read = json.loads((seen / "on_demand.json").read_text())
    assert (read["od_var"], read["od_password"], read["team"]) == (
        _sha(OD_VALUE),
        _sha(OD_PASSWORD),
        _sha(TEAM_VALUE),
    )
    assert (read["od_host"], read["settings"], read["absent"]) == (
        "od.example",
        {"limit": 3},
        "fallback",
    )
    assert "no variable 'RAFTSCHED_TOKEN'" in read["token_read"]
    assert _sha(WORKER) not in read["env_shas"]  # the worker's token is in no task's environment

    cluster.wait_caught_up(timeout=60)
    logs = {
        task: "".join(
            c.text for c in queries.read_log(cluster.engine, "on_demand", run_id, task, 1)
        )
        for task in ("templated", "python")
    }
    assert "bash reads *** at od.example as ***" in logs["templated"]
    assert "python reads *** password *** team ***" in logs["python"]
    tis = client.dags.ListTaskInstances(
        dag_pb2.ListTaskInstancesRequest(dag_id="on_demand", run_id=run_id)
    )
    python = next(ti for ti in tis.task_instances if ti.key.task_id == "python")
    assert json.loads(python.result_json) == {"note": "read ***"}
    other = client.dags.ListTaskInstances(
        dag_pb2.ListTaskInstancesRequest(dag_id="on_demand_other", run_id=other_id)
    ).task_instances[0]
    assert "variable TEAM_VAR is restricted to DAGs on_demand" in other.message, other.message

    records = client.cluster.ListAuditRecords(cluster_pb2.ListAuditRecordsRequest()).records
    reads = {
        (r.action, r.dag_id, r.run_id, r.detail.split()[0])
        for r in records
        if r.action.startswith("read_")
    }
    assert reads == {
        ("read_variable", "on_demand", run_id, "OD_VAR"),
        ("read_variable", "on_demand", run_id, "OD_JSON"),
        ("read_variable", "on_demand", run_id, "TEAM_VAR"),
        ("read_connection", "on_demand", run_id, "od_db"),
    }  # OD_ABSENT is not set, TEAM_VAR was refused to on_demand_other: no record
    assert all(r.actor == "worker w1" for r in records if r.action.startswith("read_"))
