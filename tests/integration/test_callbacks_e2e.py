"""Callbacks, notifiers and deadline alerts end to end, on SQLite and on PostgreSQL.

Everything is real and shared by the module (one cluster per backend): three ``raftsched
scheduler`` nodes, a ``raftsched worker``, an HTTP server and a tiny SMTP sink run by the test.
A failing task's on_failure_callback (the webhook notifier, its URL a raftsched connection)
posts exactly once and its output lands in the task's log; an email notifier delivers through
an SMTP connection; a DAG's deadline alerts once while its run is still going; and a callback
runs once although the leader is killed (kill -9) right after the failure commits.
"""

from __future__ import annotations

import json
import socketserver
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from api_harness import ApiCluster
from cryptography.fernet import Fernet
from harness import wait_for
from test_rest_api import _database

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import common_pb2, dag_pb2, secret_pb2
from raftsched.store import queries

pytestmark = pytest.mark.slow

SETTLE = 1.0  # seconds to watch for a second delivery after the first (none may come)


# -- the sinks ------------------------------------------------------------------------------


@dataclass
class Sinks:
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    mails: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def posted(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [body for p, body in self.posts if p == path]


def _http_server(sinks: Sinks) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with sinks.lock:
                sinks.posts.append((self.path, json.loads(body or b"{}")))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def _smtp_server(sinks: Sinks) -> socketserver.ThreadingTCPServer:
    """Just enough SMTP for smtplib: EHLO, MAIL, RCPT, DATA, QUIT."""

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.wfile.write(b"220 sink ESMTP\r\n")
            mail: dict[str, Any] = {"rcpt": []}
            while line := self.rfile.readline(65536):
                verb = line.decode(errors="replace").strip()
                upper = verb.upper()
                if upper.startswith("MAIL FROM:"):
                    mail["from"] = verb[10:].strip()
                elif upper.startswith("RCPT TO:"):
                    mail["rcpt"].append(verb[8:].strip())
                elif upper == "DATA":
                    self.wfile.write(b"354 go on\r\n")
                    data = []
                    while (part := self.rfile.readline(65536)) not in (b".\r\n", b""):
                        data.append(part.decode(errors="replace"))
                    mail["data"] = "".join(data)
                    with sinks.lock:
                        sinks.mails.append(mail)
                    mail = {"rcpt": []}
                elif upper == "QUIT":
                    self.wfile.write(b"221 bye\r\n")
                    return
                self.wfile.write(b"250 ok\r\n")

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    return socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)


# -- the DAGs -------------------------------------------------------------------------------


def _dag_source(http_port: int, record: Path) -> str:
    return textwrap.dedent(
        f"""\
        import time
        from datetime import timedelta
        from pathlib import Path

        from raftsched import DAG, BashTask
        from raftsched.dags.authoring import DeadlineAlert
        from raftsched.notifiers import EmailNotifier, WebhookNotifier

        RECORD = Path({str(record)!r})


        def slow_record(context):
            time.sleep(1.0)  # still running on the worker while the leader dies
            with RECORD.open("a") as out:
                out.write(context["run_id"] + " " + context["task_id"] + "\\n")
            print("recorded", context["task_id"], context["exception"])


        with DAG(
            "cb_webhook",
            schedule=None,
            default_args={{"on_failure_callback": WebhookNotifier(
                conn_id="hook", text="{{dag_id}}.{{task_id}} {{event}}: {{message}}"
            )}},
        ):
            BashTask("fail", command="echo about to fail; echo boom >&2; exit 3")

        with DAG("cb_email", schedule=None):
            BashTask(
                "fail",
                command="exit 4",
                on_failure_callback=EmailNotifier(
                    to=["ops@example.com"], conn_id="smtp_sink", subject="{{dag_id}} failed"
                ),
            )

        with DAG(
            "cb_deadline",
            schedule=None,
            deadline=DeadlineAlert(
                interval=timedelta(seconds=1),
                callback=WebhookNotifier(
                    url="http://127.0.0.1:{http_port}/late", text="late {{run_id}}"
                ),
            ),
        ):
            BashTask("slow", command="sleep 3")

        with DAG("cb_failover", schedule=None):
            BashTask("fail", command="exit 5", on_failure_callback=slow_record)
        """
    )


@dataclass
class Env:
    cluster: ApiCluster
    client: RaftschedClient
    sinks: Sinks
    record: Path
    runs: dict[str, str] = field(default_factory=dict)  # dag_id -> the run the fixture made

    def trigger(self, dag_id: str) -> str:
        request = dag_pb2.TriggerDagRequest(dag_id=dag_id)
        return self.client.dags.TriggerDag(request).run.run_id

    def log_text(self, dag_id: str, run_id: str, task_id: str) -> str:
        chunks = queries.read_log(self.cluster.engine, dag_id, run_id, task_id, 1)
        return "".join(c.text for c in chunks)

    def wait_log(self, dag_id: str, run_id: str, task_id: str, needle: str) -> str:
        return wait_for(
            lambda: (text := self.log_text(dag_id, run_id, task_id)) and needle in text and text,
            timeout=60,
            what=f"{needle!r} in the log of {dag_id}/{task_id}",
            interval=0.3,
            describe=lambda: self.log_text(dag_id, run_id, task_id)[-2000:],
        )


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    workdir: Path = tmp_path_factory.mktemp(f"callbacks-{request.param}")
    sinks = Sinks()
    http, smtp = _http_server(sinks), _smtp_server(sinks)
    for server in (http, smtp):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    record = workdir / "recorded.txt"
    dags = {"callbacks.py": _dag_source(http.server_address[1], record)}
    config = {"secrets": {"fernet_key": Fernet.generate_key().decode()}}
    try:
        with (
            _database(request.param, workdir) as url,
            ApiCluster(workdir / "cluster", url, dags=dags, config=config) as cluster,
        ):
            cluster.start()
            cluster.wait_leader()
            client = cluster.client()
            cluster.wait_dags(client, {"cb_webhook", "cb_email", "cb_deadline", "cb_failover"})
            for key, uri in (
                ("hook", f"http://127.0.0.1:{http.server_address[1]}/hook"),
                ("smtp_sink", f"smtp://127.0.0.1:{smtp.server_address[1]}"),
            ):
                client.secrets.SetSecret(
                    secret_pb2.SetSecretRequest(kind="connection", key=key, value=uri)
                )
            cluster.start_worker("w1", concurrency=4)
            found = Env(cluster, client, sinks, record)
            for dag_id in ("cb_webhook", "cb_email", "cb_deadline"):  # all at once: less wait
                found.runs[dag_id] = found.trigger(dag_id)
            yield found
    finally:
        http.shutdown()
        smtp.shutdown()


def test_failure_callback_posts_to_the_webhook_once(env: Env) -> None:
    run_id = env.runs["cb_webhook"]
    assert env.cluster.wait_run(env.client, "cb_webhook", run_id).state == (
        common_pb2.RUN_STATE_FAILED
    )
    (body,) = wait_for(lambda: env.sinks.posted("/hook"), timeout=60, what="a webhook post")
    assert body == {"text": "cb_webhook.fail failure: boom"}
    # the callback's own lines follow the task's output in its log, with its outcome
    log = env.wait_log("cb_webhook", run_id, "fail", "raftsched:webhook succeeded")
    assert log.index("about to fail") < log.index("--- failure callback raftsched:webhook")
    assert "webhook notified (200)" in log
    assert len(env.sinks.posted("/hook")) == 1


def test_email_notifier_sends_through_the_smtp_connection(env: Env) -> None:
    run_id = env.runs["cb_email"]
    env.cluster.wait_run(env.client, "cb_email", run_id)
    (mail,) = wait_for(lambda: list(env.sinks.mails), timeout=60, what="an email")
    assert mail["rcpt"] == ["<ops@example.com>"]
    assert "Subject: cb_email failed" in mail["data"]
    assert "failure of DAG cb_email" in mail["data"] and "task fail" in mail["data"]
    env.wait_log("cb_email", run_id, "fail", "raftsched:email succeeded")


def test_deadline_alerts_once_while_the_run_goes_on(env: Env) -> None:
    run_id = env.runs["cb_deadline"]
    (body,) = wait_for(lambda: env.sinks.posted("/late"), timeout=60, what="a deadline alert")
    assert body == {"text": f"late {run_id}"}
    run = env.cluster.wait_run(env.client, "cb_deadline", run_id)
    assert run.state == common_pb2.RUN_STATE_SUCCESS  # an alert, not a failure
    env.wait_log("cb_deadline", run_id, "__callbacks__", "deadline callback raftsched:webhook")
    request = dag_pb2.GetTaskLogRequest(
        dag_id="cb_deadline", run_id=run_id, task_id="__callbacks__", try_number=1
    )  # what `raftsched tasks logs cb_deadline RUN __callbacks__ --try 1` shows
    shown = "".join(chunk.text for chunk in env.client.dags.GetTaskLog(request))
    assert "webhook notified (200)" in shown
    assert len(env.sinks.posted("/late")) == 1


def test_callback_runs_once_although_the_leader_dies(env: Env) -> None:
    cluster = env.cluster
    leader = cluster.wait_leader()
    run_id = env.trigger("cb_failover")
    cluster.wait_task(
        env.client,
        "cb_failover",
        run_id,
        "fail",
        lambda ti: ti.state == common_pb2.TASK_STATE_FAILED,
    )
    cluster.kill(leader)  # kill -9, right after the failure committed
    cluster.wait_leader(exclude=[leader])
    env.wait_log("cb_failover", run_id, "fail", "callback slow_record succeeded")
    lines = env.record.read_text().splitlines()
    assert lines == [f"{run_id} fail"]


def test_no_callback_ran_twice(env: Env) -> None:
    """Each job above finished (its log says so): none may run again, here or elsewhere."""
    threading.Event().wait(SETTLE)
    assert len(env.sinks.posted("/hook")) == 1
    assert len(env.sinks.posted("/late")) == 1
    assert len(env.sinks.mails) == 1
    assert len(env.record.read_text().splitlines()) == 1
