"""Callbacks as a DAG file writes them (raftsched.dags.callbacks) and the built-in notifiers
(raftsched.notifiers) against local sinks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from raftsched import DAG, BashTask
from raftsched.dags.callbacks import DeadlineAlert
from raftsched.errors import DagDefinitionError
from raftsched.notifiers import (
    SlackWebhookNotifier,
    WebhookNotifier,
    render,
    send_webhook,
)
from raftsched.worker._run_callback import call_callback

CONTEXT = {
    "dag_id": "d",
    "run_id": "manual__1",
    "task_id": "t",
    "try_number": 2,
    "event": "failure",
    "state": "failed",
    "message": "boom",
    "exception": "boom",
}


def notify(context: dict[str, Any]) -> None:
    print("notified", context["task_id"])


def test_task_and_dag_callbacks_become_spec_entries() -> None:
    hook = WebhookNotifier(url="http://127.0.0.1:9/x", text="{dag_id} {event}")
    with DAG(
        "d",
        schedule=None,
        default_args={"on_retry_callback": notify},
        on_failure_callback=[notify, hook],
        deadline=DeadlineAlert(interval=timedelta(minutes=5), callback=notify),
    ) as dag:
        BashTask("a", command="true", on_failure_callback=hook)
        BashTask("b", command="true", on_retry_callback=None)  # None given: none (Airflow's)
        BashTask("c", command="true")
    spec = dag.to_spec()
    assert spec.deadline_seconds == 300.0
    assert [(e, ref) for e, ref, _ in spec.callbacks] == [
        ("failure", "notify"),
        ("failure", "raftsched:webhook"),
        ("deadline", "notify"),
    ]
    a, b, c = spec.tasks
    assert [(e, ref) for e, ref, _ in a.callbacks] == [
        ("failure", "raftsched:webhook"),
        ("retry", "notify"),  # from default_args
    ]
    assert json.loads(a.callbacks[0][2]) == {
        "url": "http://127.0.0.1:9/x",
        "text": "{dag_id} {event}",
        "timeout": 10.0,
    }
    assert b.callbacks == ()
    assert c.callbacks == (("retry", "notify", "{}"),)


def test_a_dag_without_callbacks_keeps_its_hash() -> None:
    with DAG("d", schedule=None) as dag:
        BashTask("a", command="true")
    spec = dag.to_spec()
    assert "callbacks" not in spec.to_dict() and "callbacks" not in spec.to_dict()["tasks"][0]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: BashTask("a", command="true", on_failure_callback=lambda c: None), "lambda"),
        (lambda: BashTask("a", command="true", on_failure_callback="notify"), "function"),
        (lambda: BashTask("a", command="true", on_falure_callback=notify), "unexpected"),
    ],
)
def test_bad_task_callbacks_name_the_fix(build: Any, message: str) -> None:
    with DAG("d", schedule=None), pytest.raises(DagDefinitionError, match=message):
        build()


def test_a_deadline_needs_a_callback_and_a_duration() -> None:
    with pytest.raises(DagDefinitionError, match="nothing to call"):
        DAG("d", schedule=None, deadline=timedelta(minutes=1))
    with pytest.raises(DagDefinitionError, match="at least 1 second"):
        DAG("d", schedule=None, deadline=timedelta(0), on_deadline_callback=notify)
    with pytest.raises(DagDefinitionError, match="no deadline"):
        DAG("d", schedule=None, on_deadline_callback=notify)


def test_notifiers_need_a_target() -> None:
    with pytest.raises(ValueError, match="conn_id"):
        WebhookNotifier()
    assert SlackWebhookNotifier(slack_webhook_conn_id="s").settings["conn_id"] == "s"


def test_render_fills_known_fields_and_keeps_others() -> None:
    assert render("{dag_id}.{task_id} {event}: {message} {nope}", CONTEXT) == (
        "d.t failure: boom {nope}"
    )
    assert render(
        "raftsched: {event} of DAG {dag_id}, run {run_id}{task_part}{message_part}", CONTEXT
    ) == ("raftsched: failure of DAG d, run manual__1, task t (boom)")


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[Any]]]:
    got: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200 if self.path == "/ok" else 500)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()


def test_webhook_posts_slack_json_from_a_connection(webhook, monkeypatch) -> None:
    base, got = webhook
    monkeypatch.setenv("RAFTSCHED_CONN_hook", f"{base}/ok")
    send_webhook(CONTEXT, conn_id="hook", text="{task_id} {event}")
    assert got == [{"text": "t failure"}]
    with pytest.raises(Exception, match="500"):
        send_webhook(CONTEXT, url=f"{base}/broken")


def test_a_callback_job_runs_functions_and_notifiers(webhook, capsys) -> None:
    base, got = webhook
    module = type(__import__("sys"))("dagfile")
    module.notify = notify  # type: ignore[attr-defined]
    payload = {"context": CONTEXT, "settings": {}}
    assert call_callback(module, "dagfile.py", "notify", payload) == 0
    assert "notified t" in capsys.readouterr().out
    assert call_callback(module, "dagfile.py", "missing", payload) == 1
    hook = {"context": CONTEXT, "settings": {"url": f"{base}/ok"}}
    assert call_callback(module, "dagfile.py", "raftsched:webhook", hook) == 0
    assert len(got) == 1
    broken = {"context": CONTEXT, "settings": {"url": f"{base}/broken"}}
    assert call_callback(module, "dagfile.py", "raftsched:webhook", broken) == 1
    assert "HTTP Error 500" in capsys.readouterr().err


def test_a_callback_context_reaches_it_unrendered(capsys) -> None:
    """The Python-attempt path renders templates in kwargs: a context holding "{{" (a task's
    stderr line) must reach the callback as it was."""
    from types import SimpleNamespace

    from raftsched.dags.templating import render_assignment
    from raftsched.worker._run_callback import CALLBACK_KEY
    from raftsched.worker.callback_runner import assignment_for

    context = {**CONTEXT, "message": "{{ 1 / 0 }} {% raw %}", "conf": {"x": "{{ run_id }}"}}
    job = SimpleNamespace(
        context_json=json.dumps(context),
        kwargs_json="{}",
        key=SimpleNamespace(dag_id="d", run_id="r", task_id=""),
        token=7,
        try_number=0,
        callable="show",
        fileloc="/dags/d.py",
    )
    a = render_assignment(assignment_for(job))
    assert a.key.task_id == "__callbacks__" and a.kind == "python"
    seen: list[Any] = []
    module = type(__import__("sys"))("dagfile")
    module.show = seen.append  # type: ignore[attr-defined]
    assert call_callback(module, "d.py", "show", a.kwargs[CALLBACK_KEY]) == 0
    assert seen == [context]
