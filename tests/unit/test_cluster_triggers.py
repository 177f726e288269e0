"""The triggers that ask the cluster (docs/architecture.md §17): ``sql`` (a query returns a
row, on a real SQLite file and a real PostgreSQL database), ``external`` (another DAG's run
reached a state), the node's side of both (ExternalRunState, and ResolveSecrets for the
holder of a trigger's lease), and the sensors over them: SqlSensor and ExternalTaskSensor."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from test_state_harness import T0, Sim, dag, task
from test_state_triggers import defer, lease_triggers

from raftsched import secrets as sx
from raftsched.airflow import DAG
from raftsched.airflow.exceptions import AirflowException, AirflowSkipException
from raftsched.airflow.providers.common.sql.sensors.sql import SqlSensor
from raftsched.airflow.sensors.external_task import ExternalTaskSensor
from raftsched.api.gen import common_pb2, secret_pb2, worker_pb2
from raftsched.api.servicers.external_state import ExternalStateRpcs
from raftsched.api.servicers.secrets import SecretServicer
from raftsched.cluster.read_view import ReadView
from raftsched.cluster.state_copy import capture
from raftsched.core import commands as c
from raftsched.dags import sql_check
from raftsched.dags.deferral import ExternalStateTrigger, SqlTrigger, TaskDeferred
from raftsched.dags.taskflow import registered_callable
from raftsched.errors import StatusError, TriggerError
from raftsched.triggerer import triggers

START = datetime(2024, 1, 1, tzinfo=UTC)


class Help:
    """The cluster's answers a trigger gets (``cluster_triggers.ClusterHelp``)."""

    def __init__(self, uri: str = "", states: list[Any] | None = None) -> None:
        self.uri, self.states, self.asked = uri, list(states or []), []

    def connection(self, conn_id: str) -> str:
        self.asked.append(conn_id)
        return self.uri

    def external_state(self, dag_id: str, logical: datetime, task_ids: list[str]) -> Any:
        self.asked.append((dag_id, logical, tuple(task_ids)))
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def run(kind: str, args: dict[str, Any], help: Any, timeout: float = 20.0) -> Any:
    async def go() -> Any:
        text = await asyncio.wait_for(
            triggers.run_trigger(kind, json.dumps(args), "/dags/x.py", help), timeout
        )
        return json.loads(text)

    return asyncio.run(go())


# -- sql ------------------------------------------------------------------------------------


def test_sql_check_urls_and_the_first_cell_rule(tmp_path: Path) -> None:
    assert sql_check.sqlalchemy_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert sql_check.sqlalchemy_url("postgresql+psycopg2://h/db") == "postgresql+psycopg2://h/db"
    uri = f"sqlite:///{tmp_path / 'x.db'}"
    assert sql_check.first_row(uri, "SELECT 1 WHERE 1 = 0") is None
    assert sql_check.first_row(uri, "SELECT :a, 'b'", {"a": 3}) == [3, "b"]
    done = sql_check.row_done
    assert not done(None, first_cell_truthy=False) and done([0], first_cell_truthy=False)
    assert [done([v], first_cell_truthy=True) for v in (0, "0", "", None, 1, "x")] == [
        False,
        False,
        False,
        False,
        True,
        True,
    ]
    with pytest.raises(ValueError, match="empty"):
        SqlTrigger("c", " ").args()
    with pytest.raises(ValueError, match="name"):
        SqlTrigger("no-dash", "SELECT 1").args()


def _fires_on_insert(uri: str, table: str) -> None:
    engine = sa.create_engine(sql_check.sqlalchemy_url(uri))
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {table} (id INTEGER, ok INTEGER)")
    help = Help(uri)
    inserted = threading.Event()

    def insert() -> None:
        threading.Event().wait(1.5)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"INSERT INTO {table} VALUES (7, 0), (8, 1)")
        inserted.set()

    thread = threading.Thread(target=insert)
    thread.start()
    try:
        args = SqlTrigger(
            "warehouse",
            f"SELECT id, ok FROM {table} WHERE id > :after ORDER BY ok DESC",
            {"after": 1},
            poke_interval=1,
            first_cell_truthy=True,
        ).args()
        event = run("sql", args, help)
    finally:
        thread.join(10)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {table}")
        engine.dispose()
    assert inserted.is_set() and event == {"row": [8, 1]}
    assert help.asked == ["warehouse"]  # fetched once, under the trigger's lease


def test_the_sql_trigger_fires_once_a_row_is_there_on_sqlite(tmp_path: Path) -> None:
    _fires_on_insert(f"sqlite:///{tmp_path / 'data.db'}", "landing")


@pytest.mark.postgres
def test_the_sql_trigger_fires_once_a_row_is_there_on_postgres(postgres_url: str) -> None:
    _fires_on_insert(postgres_url, f"landing_{uuid.uuid4().hex[:8]}")


def test_the_triggerers_own_connection_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path / 'own.db'}"
    monkeypatch.setenv(sx.BACKEND_CONN_PREFIX + "mine", uri)
    help = Help("sqlite:////nowhere/at/all.db")
    assert run("sql", SqlTrigger("mine", "SELECT 'x'", poke_interval=1).args(), help) == {
        "row": ["x"]
    }
    assert help.asked == []
    with pytest.raises(TriggerError, match="unknown trigger kind"):
        run("sql", {}, None)  # no help: this triggerer cannot run it


# -- external -------------------------------------------------------------------------------


def test_the_external_trigger_waits_then_fires_fails_or_skips() -> None:
    args = ExternalStateTrigger(
        "other",
        START,
        ("load",),
        failed_states=("failed",),
        skipped_states=("skipped",),
        poke_interval=1,
    ).args()
    waiting = [(False, "", [""]), (True, "running", ["running"]), (True, "success", ["success"])]
    help = Help(states=waiting)
    assert run("external", args, help) == {"state": "success", "states": {"load": "success"}}
    assert help.asked[0] == ("other", START, ("load",))
    with pytest.raises(TriggerError, match="failed state"):
        run("external", args, Help(states=[(True, "running", ["failed"])]))
    skipped = run("external", args, Help(states=[(True, "running", ["skipped"])]))
    assert skipped["outcome"] == "__skipped__"
    whole_run = ExternalStateTrigger("other", START, poke_interval=1).args()
    assert run("external", whole_run, Help(states=[(True, "success", [])]))["state"] == "success"


class FakeCtx:
    def __init__(self, sim: Sim) -> None:
        self.sim, self.caught_up = sim, 0
        self.engine = None

    def read(self, fn: Any) -> Any:
        return fn(self.sim.state), common_pb2.Freshness()

    def read_index(self, context: Any) -> None:
        self.caught_up += 1

    def view(self) -> ReadView:
        return ReadView.build(capture(self.sim.state))

    def freshness(self) -> Any:
        return common_pb2.Freshness()


class Context:
    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise StatusError(code, details)


def deferred_and_leased() -> tuple[Sim, dict[str, Any]]:
    """Task "a" of DAG "d" deferred and its trigger leased to triggerer "t1"; DAG "other"
    has a run at T0 whose "load" ran."""
    declared = ((sx.DECLARATION_ENV, sx.encode_declaration([], ["warehouse"])),)
    sim = Sim()
    assert sim.register(dag("d", task("a", env=declared)), dag("other", task("load"))).ok
    sim.create("d")
    (grant,) = sim.lease()
    assert defer(sim, grant).ok
    (trigger,) = lease_triggers(sim)
    sim.create("other")
    sim.run_task("load")
    return sim, trigger


def _ref(trigger: dict[str, Any], token: int | None = None) -> Any:
    return worker_pb2.TriggerRef(
        key=common_pb2.TaskKey(
            dag_id=trigger["dag_id"], run_id=trigger["run_id"], task_id=trigger["task_id"]
        ),
        token=trigger["token"] if token is None else token,
    )


def test_external_run_state_answers_the_holder_of_a_trigger_lease_only() -> None:
    sim, trigger = deferred_and_leased()
    rpcs = ExternalStateRpcs()
    rpcs.ctx = FakeCtx(sim)  # type: ignore[attr-defined]
    stamp = common_pb2.google_dot_protobuf_dot_timestamp__pb2.Timestamp()
    stamp.FromDatetime(T0)

    def ask(who: str = "t1", token: int | None = None, when: Any = stamp) -> Any:
        request = worker_pb2.ExternalRunStateRequest(
            triggerer_id=who,
            ref=_ref(trigger, token),
            dag_id="other",
            logical_date=when,
            task_ids=["load", "nope"],
        )
        return rpcs.ExternalRunState(request, Context())

    answer = ask()
    assert (answer.found, answer.run_state, list(answer.task_states)) == (
        True,
        "success",
        ["success", ""],
    )
    later = common_pb2.google_dot_protobuf_dot_timestamp__pb2.Timestamp()
    later.FromDatetime(T0 + timedelta(days=1))
    assert not ask(when=later).found
    for who, token in (("t2", None), ("t1", trigger["token"] + 1)):
        with pytest.raises(StatusError) as refused:
            ask(who, token)
        assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_resolve_secrets_answers_the_holder_of_a_trigger_lease() -> None:
    sim, trigger = deferred_and_leased()
    key = Fernet.generate_key().decode()
    box = sx.SecretBox([key])
    assert sim.apply(
        c.SetSecret(
            request_id=sim.rid(),
            now=T0,
            kind=sx.CONNECTION,
            key="warehouse",
            ciphertext=box.encrypt("sqlite:////data/w.db"),
            description="",
        )
    ).ok
    servicer = SecretServicer(FakeCtx(sim), [key])  # type: ignore[arg-type]

    def ask(who: str, token: int | None = None) -> Any:
        request = secret_pb2.ResolveSecretsRequest(
            key=_ref(trigger).key,
            token=trigger["token"] if token is None else token,
            worker_id=who,
            connections=["warehouse"],
        )
        return servicer.ResolveSecrets(request, Context())

    (value,) = ask("t1").values
    assert value.value == "sqlite:////data/w.db"
    for who, token in (("t2", None), ("t1", trigger["token"] + 1), ("w1", None)):
        with pytest.raises(StatusError) as refused:
            ask(who, token)
        assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION


# -- the sensors ----------------------------------------------------------------------------


def _sensor(dag_id: str, task_id: str) -> Any:
    fn = registered_callable(f"@taskflow:{dag_id}:{task_id}")
    assert fn is not None
    return fn


def test_sql_sensor_declares_its_connection_pokes_and_defers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path / 'wh.db'}"
    with DAG("q", schedule=None, start_date=START) as d:
        SqlSensor(task_id="poke", conn_id="wh", sql="SELECT COUNT(*) FROM t", poke_interval=1)
        SqlSensor(
            task_id="deferred", conn_id="wh", sql="SELECT x FROM t WHERE x > 5", deferrable=True
        )
        SqlSensor(
            task_id="judged",
            conn_id="wh",
            sql="SELECT COUNT(*) FROM t",
            success=lambda n: n >= 2,
            deferrable=True,
        )
        SqlSensor(task_id="empty", conn_id="wh", sql="SELECT 1 WHERE 0", fail_on_empty=True)
    specs = {s.task_id: s for s in d.to_spec().tasks}
    assert sx.declared(specs["poke"].env) == ([], ["wh"])
    config = {t: json.loads(s.kwargs_json)["sensor"] for t, s in specs.items()}
    monkeypatch.setenv(sx.conn_env("wh"), uri)
    engine = sa.create_engine(uri)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        conn.exec_driver_sql("INSERT INTO t VALUES (1)")
    engine.dispose()
    assert _sensor("q", "poke")(sensor=config["poke"]) is None  # COUNT 1: truthy
    with pytest.raises(TaskDeferred) as deferred:
        _sensor("q", "deferred")(sensor=config["deferred"])
    args = deferred.value.trigger.args()
    assert deferred.value.trigger.kind == "sql" and args["first_cell_truthy"] is True
    assert _sensor("q", "deferred")(sensor=config["deferred"], event={"row": [1]}) == {"row": [1]}
    with pytest.raises(TaskDeferred) as again:  # its success callable says not yet: waits on
        _sensor("q", "judged")(sensor=config["judged"], event={"row": [1]})
    assert again.value.trigger.args()["first_cell_truthy"] is False
    with pytest.raises(AirflowException, match="no row"):
        _sensor("q", "empty")(sensor=config["empty"])


def test_external_task_sensor_always_defers_on_the_other_runs_date(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with DAG("e", schedule=None, start_date=START):
        ExternalTaskSensor(
            task_id="delta",
            external_dag_id="up",
            external_task_id="load",
            execution_delta=timedelta(hours=1),
            failed_states=["failed"],
            skipped_states=["skipped"],
            poke_interval=2,
        )
        ExternalTaskSensor(
            task_id="fn",
            external_dag_id="up",
            execution_date_fn=lambda d: d.replace(hour=5),
            mode="reschedule",
        )
    monkeypatch.setenv("RAFTSCHED_LOGICAL_DATE", "2024-03-01T10:00:00+00:00")
    config = {
        "poke_interval": 2.0,
        "timeout": 60.0,
        "mode": "poke",
        "deferrable": False,
        "soft_fail": False,
        "args": {
            "dag_id": "up",
            "task_ids": ["load"],
            "allowed": ["success"],
            "failed": ["failed"],
            "skipped": ["skipped"],
            "delta": 3600.0,
        },
    }
    with pytest.raises(TaskDeferred) as deferred:
        _sensor("e", "delta")(sensor=config)
    args = deferred.value.trigger.args()
    assert deferred.value.trigger.kind == "external"
    assert (args["logical_date"], args["task_ids"], args["failed_states"]) == (
        "2024-03-01T09:00:00+00:00",
        ["load"],
        ["failed"],
    )
    assert 0 < float(deferred.value.timeout or 0) <= 60
    with pytest.raises(TaskDeferred) as by_fn:
        _sensor("e", "fn")(sensor={**config, "args": {**config["args"], "task_ids": []}})
    assert by_fn.value.trigger.args()["logical_date"] == "2024-03-01T05:00:00+00:00"
    done = {"state": "running", "states": {"load": "success"}}
    assert _sensor("e", "delta")(sensor=config, event=done) == done
    with pytest.raises(AirflowSkipException):
        _sensor("e", "delta")(sensor=config, event={"state": "x", "outcome": "__skipped__"})


def test_http_sensor_pokes_defers_and_keeps_credentials_out_of_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import http.server

    from raftsched.airflow.providers.http.sensors.http import HttpSensor

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ready = self.path.startswith("/ready")
            self.send_response(200 if ready else 404)
            self.end_headers()
            self.wfile.write(b'{"ok": true}' if ready else b"no")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with DAG("h", schedule=None, start_date=START) as d:
            HttpSensor(task_id="full", endpoint=f"{base}/ready", poke_interval=1)
            HttpSensor(
                task_id="conn",
                http_conn_id="api",
                endpoint="later",
                request_params={"q": 1},
                deferrable=True,
                poke_interval=1,
            )
            HttpSensor(
                task_id="checked",
                http_conn_id="api",
                endpoint="ready",
                response_check=lambda r: r.json()["ok"] is False,
                deferrable=True,
                poke_interval=1,
            )
        specs = {s.task_id: s for s in d.to_spec().tasks}
        assert sx.declared(specs["full"].env) == ([], [])
        assert sx.declared(specs["conn"].env) == ([], ["api"])
        config = {t: json.loads(s.kwargs_json)["sensor"] for t, s in specs.items()}
        assert _sensor("h", "full")(sensor=config["full"]) is None
        monkeypatch.setenv(sx.conn_env("api"), base.replace("http://", "http://u:secret@"))
        with pytest.raises(TaskDeferred) as resched:  # credentials: no trigger carries them
            _sensor("h", "conn")(sensor=config["conn"])
        assert resched.value.trigger.kind == "time"
        monkeypatch.setenv(sx.conn_env("api"), base)
        with pytest.raises(TaskDeferred) as deferred:
            _sensor("h", "conn")(sensor=config["conn"])
        assert deferred.value.trigger.args()["url"] == f"{base}/later?q=1"
        with pytest.raises(TaskDeferred):  # fired, but its response_check still says no
            _sensor("h", "checked")(sensor=config["checked"], event={"status": 200})
    finally:
        server.shutdown()
        server.server_close()


def test_a_failing_sql_check_raises_without_the_connections_credentials() -> None:
    help = Help("postgresql://u:hunter2-secret@127.0.0.1:1/db?sslmode=disable")
    args = SqlTrigger("warehouse", "SELECT 1", poke_interval=1).args()
    with pytest.raises(TriggerError) as failed:
        run("sql", args, help)
    assert "warehouse failed" in str(failed.value)
    assert "hunter2-secret" not in str(failed.value) and failed.value.__cause__ is None
