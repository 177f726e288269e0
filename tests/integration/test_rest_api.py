"""The REST API (/api/v1) against a real cluster, on SQLite and on PostgreSQL.

Everything is real (:class:`webstack.WebStack`): three ``raftsched scheduler`` nodes, a
``raftsched worker`` running the tasks, a ``raftsched webserver`` (gunicorn), behind nginx when
it is installed; the client is plain ``urllib`` speaking HTTP + JSON with bearer tokens of
each role. The tests share one stack per backend and run in file order (each uses its own DAG
or run, so none depends on another's leftovers beyond the stack itself).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import wait_for
from webstack import ADMIN_TOKEN, WebStack

pytestmark = pytest.mark.slow

OPERATOR_TOKEN = "rest-operator-token-0123456789abcdef"
VIEWER_TOKEN = "rest-viewer-token-0123456789abcdef"
APPLIED = "X-Raftsched-Applied-Index"
MIN_INDEX = "X-Raftsched-Min-Index"

HELLO = """
from datetime import datetime

from raftsched import DAG, BashTask

with DAG("rest_hello", schedule=None, start_date=datetime(2024, 1, 1), tags=["rest"]):
    hello = BashTask("hello", command="echo hello-$RAFTSCHED_TRY_NUMBER; sleep 2; echo done")
    bye = BashTask("bye", command="echo bye")
    hello >> bye
"""

DAILY = """
from datetime import datetime

from raftsched import DAG, BashTask

with DAG("rest_daily", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    BashTask("noop", command="true")
"""

# Several DAGs, for walking pages, and one to pause.
MANY = """
from raftsched import DAG, BashTask

for i in range(5):
    with DAG(f"rest_page_{i}", schedule=None, description="paging"):
        BashTask("noop", command="true")

with DAG("rest_pausable", schedule=None):
    BashTask("noop", command="true")
"""

SLOW = """
from raftsched import DAG, BashTask

with DAG("rest_slow", schedule=None):
    BashTask("sleep", command="echo sleeping; sleep 60")
"""

BROKEN = "this is not python (\n"

DAG_IDS = {"rest_hello", "rest_daily", "rest_pausable", "rest_slow"} | {
    f"rest_page_{i}" for i in range(5)
}


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]
    body: Any  # parsed JSON, or the text

    @property
    def applied(self) -> int:
        return int(self.headers.get(APPLIED, "0") or 0)


class Rest:
    """A tiny JSON client of /api/v1 (urllib): never raises for an HTTP status."""

    def __init__(self, base_url: str, token: str | None, timeout: float = 30.0) -> None:
        self.base = base_url.rstrip("/") + "/api/v1"
        self.token = token
        self.timeout = timeout

    def _request(
        self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> urllib.request.Request:
        data = None
        all_headers = {"Accept": "application/json", **(headers or {})}
        if self.token is not None:
            all_headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            all_headers.setdefault("Content-Type", "application/json")
        return urllib.request.Request(
            self.base + path, data=data, method=method, headers=all_headers
        )

    def call(
        self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> Answer:
        request = self._request(method, path, body, headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                status, head, raw = resp.status, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as err:
            status, head, raw = err.code, dict(err.headers.items()), err.read()
        text = raw.decode(errors="replace")
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = text
        return Answer(status, head, parsed)

    def get(self, path: str, **params: Any) -> Answer:
        headers = params.pop("headers", None)
        query = urllib.parse.urlencode(params, doseq=True)
        return self.call("GET", path + (f"?{query}" if query else ""), headers=headers)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Answer:
        return self.call("POST", path, body, **kwargs)

    def stream(self, path: str, **params: Any) -> tuple[int, str, list[dict[str, Any]]]:
        """GET an ndjson stream: status, content type, every line parsed."""
        request = self._request("GET", f"{path}?{urllib.parse.urlencode(params)}")
        with urllib.request.urlopen(request, timeout=self.timeout) as resp:
            lines = [json.loads(line) for line in resp if line.strip()]
            return resp.status, resp.headers.get("Content-Type", ""), lines


@contextlib.contextmanager
def _database(backend: str, workdir: Path) -> Iterator[str]:
    """A fresh database for the module's stack (tests/conftest.py makes one per test)."""
    if backend == "sqlite":
        yield f"sqlite:///{workdir / 'metadata' / 'raftsched.db'}"
        return
    import sqlalchemy as sa

    admin_url = os.environ.get("RAFTSCHED_TEST_PG_URL")
    if not admin_url:
        pytest.skip("RAFTSCHED_TEST_PG_URL is not set (CI sets it; these tests then must run)")
    name = f"raftsched_t_{uuid.uuid4().hex[:16]}"
    admin = sa.create_engine(
        admin_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}
    )
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as err:
        admin.dispose()
        pytest.fail(f"RAFTSCHED_TEST_PG_URL is set but PostgreSQL is unreachable: {err.orig}")
    try:
        yield sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@dataclass
class Stack:
    web: WebStack
    viewer: Rest
    operator: Rest
    admin: Rest
    anonymous: Rest


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp(f"rest-{request.param}")
    dags = {"hello.py": HELLO, "daily.py": DAILY, "many.py": MANY, "slow.py": SLOW}
    dags["broken.py"] = BROKEN
    config = {"api": {"operator_tokens": OPERATOR_TOKEN, "viewer_tokens": VIEWER_TOKEN}}
    with (
        _database(request.param, workdir) as url,
        WebStack(workdir, url, webservers=1, dags=dags, config=config) as web,
    ):
        web.start()
        rest = Stack(
            web,
            viewer=Rest(web.url, VIEWER_TOKEN),
            operator=Rest(web.url, OPERATOR_TOKEN),
            admin=Rest(web.url, ADMIN_TOKEN),
            anonymous=Rest(web.url, None),
        )

        def registered() -> bool:
            found = rest.viewer.get("/dags", page_size=1000)
            return found.status == 200 and {d["dag_id"] for d in found.body["dags"]} >= DAG_IDS

        wait_for(registered, timeout=60, what="the test DAGs registered", interval=0.5)
        try:
            yield rest
        finally:
            if request.session.testsfailed:
                web.print_logs()


def _problem(answer: Answer, status: int, code: str) -> dict[str, Any]:
    assert answer.status == status, (answer.status, answer.body)
    assert isinstance(answer.body, dict), answer.body
    assert answer.body["code"] == code, answer.body
    assert answer.body["message"], answer.body
    return answer.body


def _task_states(rest: Rest, dag_id: str, run_id: str) -> dict[str, str]:
    found = rest.get(f"/dags/{dag_id}/runs/{run_id}/task-instances")
    assert found.status == 200, found.body
    return {ti["task_id"]: ti["state"] for ti in found.body["task_instances"]}


def _wait_states(rest: Rest, dag_id: str, run_id: str, want: dict[str, str]) -> None:
    wait_for(
        lambda: _task_states(rest, dag_id, run_id) == want,
        timeout=45,
        what=f"{dag_id}/{run_id} tasks {want}",
        interval=0.3,
        describe=lambda: _task_states(rest, dag_id, run_id),
    )


# -- no token needed: health, the document, the docs page ------------------------------------


def test_health_needs_no_token(stack: Stack) -> None:
    health = stack.anonymous.get("/health")
    assert health.status == 200, health.body
    assert health.body["status"] == "ok" and health.body["leader"]


def test_the_openapi_document_is_valid_and_lists_every_route(stack: Stack) -> None:
    answer = stack.anonymous.get("/openapi.json")
    assert answer.status == 200
    spec = answer.body
    assert spec["openapi"].startswith("3.")
    try:
        from openapi_spec_validator import validate
    except ImportError:  # pragma: no cover - [dev] installs it
        assert {"info", "paths", "components"} <= set(spec)
    else:
        validate(spec)
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"

    # Every /api/v1 route the webserver serves (bar the document, its page and the JSON 404
    # for unknown paths) is in the document, with each of its methods.
    from raftsched.web import create_app

    app = create_app({"TESTING": True, "RAFTSCHED_SERVERS": ("127.0.0.1:1",)})
    served = set()
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/") or rule.endpoint in (
            "api_v1.docs",
            "api_v1.unknown_route",
        ):
            continue
        if rule.rule == "/api/v1/openapi.json":
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)  # <path:uri> is {uri}
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            served.add((method.lower(), path))
    documented = {(m, p) for p, item in spec["paths"].items() for m in item if m != "parameters"}
    assert served and served == documented, served ^ documented
    for path in (
        "/api/v1/dags",
        "/api/v1/dags/{dag_id}/runs",
        "/api/v1/dags/{dag_id}/backfill",
        "/api/v1/dags/{dag_id}/runs/{run_id}/task-instances/{task_id}/logs",
        "/api/v1/import-errors",
        "/api/v1/cluster",
    ):
        assert path in spec["paths"], path

    page = stack.anonymous.get("/docs")
    assert page.status == 200 and "<html" in page.body
    assert "cdn" not in page.body.lower() and "<script" not in page.body.lower()
    for path in spec["paths"]:
        assert f"<code>{path}</code>" in page.body, path


# -- who may do what ---------------------------------------------------------------------------


def test_tokens_and_roles(stack: Stack) -> None:
    _problem(stack.anonymous.get("/dags"), 401, "UNAUTHENTICATED")
    assert "Bearer" in stack.anonymous.get("/dags").headers.get("WWW-Authenticate", "")
    _problem(
        Rest(stack.web.url, "not-a-token-of-this-cluster").get("/dags"), 401, "UNAUTHENTICATED"
    )
    bad_scheme = stack.anonymous.get("/dags", headers={"Authorization": f"Basic {VIEWER_TOKEN}"})
    _problem(bad_scheme, 401, "UNAUTHENTICATED")

    assert stack.viewer.get("/dags").status == 200
    assert stack.viewer.get("/dags/rest_hello").status == 200
    denied = _problem(stack.viewer.post("/dags/rest_hello/runs", {}), 403, "PERMISSION_DENIED")
    assert "operator" in denied["message"]
    _problem(stack.viewer.post("/dags/rest_pausable/pause"), 403, "PERMISSION_DENIED")
    _problem(stack.viewer.post("/dags/rest_hello/runs/x/clear", {}), 403, "PERMISSION_DENIED")
    # a worker's token is not a person's: no DAG reads
    worker = Rest(stack.web.url, stack.web.cluster.sections["api"]["worker_tokens"])
    _problem(worker.get("/dags"), 403, "PERMISSION_DENIED")


def test_unknown_things_are_json_404s(stack: Stack) -> None:
    _problem(stack.viewer.get("/dags/no_such_dag"), 404, "NOT_FOUND")
    _problem(stack.viewer.get("/dags/rest_hello/runs/no_such_run"), 404, "NOT_FOUND")
    _problem(stack.viewer.get("/no/such/route"), 404, "NOT_FOUND")
    _problem(stack.operator.post("/dags/no_such_dag/runs", {}), 404, "NOT_FOUND")


# -- DAGs ---------------------------------------------------------------------------------------


def test_list_get_pause_unpause_with_read_your_writes(stack: Stack) -> None:
    found = stack.viewer.get("/dags", search="rest_hello")
    assert found.status == 200 and found.applied > 0
    assert [d["dag_id"] for d in found.body["dags"]] == ["rest_hello"]
    dag = stack.viewer.get("/dags/rest_hello").body
    assert dag["tags"] == ["rest"] and dag["manual_only"] is True
    assert [t["task_id"] for t in dag["tasks"]] == ["bye", "hello"]
    assert next(t for t in dag["tasks"] if t["task_id"] == "bye")["upstream"] == ["hello"]

    paused = stack.operator.post("/dags/rest_pausable/pause")
    assert paused.status == 200, paused.body
    assert paused.body["changed"] is True and paused.body["dag"]["paused"] is True
    assert paused.applied > 0
    # another client that saw the pause's index reads it, whichever node answers
    seen = {MIN_INDEX: str(paused.applied)}
    for _ in range(3):
        read = stack.viewer.get("/dags/rest_pausable", headers=seen)
        assert read.status == 200 and read.body["paused"] is True
        assert read.applied >= paused.applied
    assert stack.operator.post("/dags/rest_pausable/pause").body["changed"] is False
    only_paused = stack.viewer.get("/dags", paused="true", headers=seen).body["dags"]
    assert "rest_pausable" in {d["dag_id"] for d in only_paused}

    unpaused = stack.operator.post("/dags/rest_pausable/unpause")
    assert unpaused.status == 200 and unpaused.body["dag"]["paused"] is False
    read = stack.viewer.get("/dags/rest_pausable", headers={MIN_INDEX: str(unpaused.applied)})
    assert read.body["paused"] is False
    _problem(stack.viewer.get("/dags", headers={MIN_INDEX: "soon"}), 400, "INVALID_ARGUMENT")


def test_pagination_walks_every_page(stack: Stack) -> None:
    seen: list[str] = []
    token, pages = "", 0
    while True:
        page = stack.viewer.get("/dags", page_size=2, page_token=token)
        assert page.status == 200, page.body
        assert len(page.body["dags"]) <= 2
        seen += [d["dag_id"] for d in page.body["dags"]]
        pages += 1
        token = page.body["next_page_token"]
        if not token:
            break
        assert pages < 50
    assert len(seen) == len(set(seen)) == page.body["total_size"]
    assert set(seen) >= DAG_IDS and pages >= 4

    _problem(stack.viewer.get("/dags", page_size=0), 400, "INVALID_ARGUMENT")
    assert stack.viewer.get("/dags", page_size=5000).body["field"] == "page_size"


# -- runs, task instances, logs ----------------------------------------------------------------


def test_trigger_runs_task_instances_logs_clear_and_mark(stack: Stack) -> None:
    op, viewer = stack.operator, stack.viewer
    run_id = "rest-run-1"
    made = op.post("/dags/rest_hello/runs", {"conf": {"x": 1, "who": "rest"}, "run_id": run_id})
    assert made.status == 201, made.body
    assert made.body["run_id"] == run_id and made.body["conf"] == {"x": 1, "who": "rest"}
    assert made.body["run_type"] == "manual" and made.applied > 0
    seen = {MIN_INDEX: str(made.applied)}

    # read-your-writes: the run is listed at once, through the DAG and through /runs
    runs = viewer.get("/dags/rest_hello/runs", headers=seen)
    assert run_id in {r["run_id"] for r in runs.body["runs"]}, runs.body
    every = viewer.get("/runs", dag_id="rest_hello", headers=seen)
    assert run_id in {r["run_id"] for r in every.body["runs"]}
    got = viewer.get(f"/dags/rest_hello/runs/{run_id}", headers=seen)
    assert got.status == 200 and got.body["conf"] == {"x": 1, "who": "rest"}

    again = op.post("/dags/rest_hello/runs", {"run_id": run_id})
    _problem(again, 409, "ALREADY_EXISTS")

    # the worker runs it; follow the log of the running task to its end
    wait_for(
        lambda: _task_states(viewer, "rest_hello", run_id)["hello"] in ("running", "success"),
        timeout=45,
        what="hello to start",
        interval=0.2,
    )
    path = f"/dags/rest_hello/runs/{run_id}/task-instances/hello/logs"
    status, kind, lines = viewer.stream(path, follow="true", timeout=20)
    assert status == 200 and kind.startswith("application/x-ndjson")
    assert lines[-1]["end"] is True and lines[-1]["reason"] == "finished", lines[-1]
    text = "".join(line.get("text", "") for line in lines[:-1])
    assert "hello-1" in text and "done" in text, lines
    assert lines[-1]["last_seq"] == lines[-2]["seq"]
    _wait_states(viewer, "rest_hello", run_id, {"hello": "success", "bye": "success"})

    log = viewer.get(path)
    assert log.status == 200 and "hello-1" in "".join(c["text"] for c in log.body["chunks"])
    after = viewer.get(path, after_seq=log.body["last_seq"])
    assert after.body["chunks"] == [] and after.body["more"] is False
    # a finished attempt's stream ends at once
    status, _, lines = viewer.stream(path, follow="true", after_seq=log.body["last_seq"])
    assert lines == [{"end": True, "reason": "finished", "last_seq": log.body["last_seq"]}]

    tis = viewer.get(f"/dags/rest_hello/runs/{run_id}/task-instances", page_size=1)
    assert [t["task_id"] for t in tis.body["task_instances"]] == ["bye"]
    rest = viewer.get(
        f"/dags/rest_hello/runs/{run_id}/task-instances",
        page_size=1,
        page_token=tis.body["next_page_token"],
    )
    assert [t["task_id"] for t in rest.body["task_instances"]] == ["hello"]
    assert rest.body["next_page_token"] == ""

    marked = op.post(
        f"/dags/rest_hello/runs/{run_id}/mark", {"task_ids": ["bye"], "state": "failed"}
    )
    assert marked.status == 200 and marked.body["marked_task_ids"] == ["bye"], marked.body
    states = viewer.get(
        f"/dags/rest_hello/runs/{run_id}/task-instances", headers={MIN_INDEX: str(marked.applied)}
    )
    assert {t["task_id"]: t["state"] for t in states.body["task_instances"]}["bye"] == "failed"
    bad_mark = op.post(f"/dags/rest_hello/runs/{run_id}/mark", {"task_ids": ["bye"], "state": "x"})
    assert _problem(bad_mark, 400, "INVALID_ARGUMENT")["field"] == "state"

    cleared = op.post(f"/dags/rest_hello/runs/{run_id}/clear", {"task_ids": ["bye"]})
    assert cleared.status == 200 and cleared.body["cleared_task_ids"] == ["bye"], cleared.body
    _wait_states(viewer, "rest_hello", run_id, {"hello": "success", "bye": "success"})
    tries = viewer.get(f"/dags/rest_hello/runs/{run_id}/task-instances").body["task_instances"]
    assert {t["task_id"]: t["try_number"] for t in tries} == {"hello": 1, "bye": 2}


def test_following_a_long_task_ends_at_the_timeout_then_mark_stops_it(stack: Stack) -> None:
    made = stack.operator.post("/dags/rest_slow/runs", {"run_id": "slow-1"})
    assert made.status == 201, made.body
    path = "/dags/rest_slow/runs/slow-1/task-instances/sleep/logs"

    def started() -> bool:
        chunks = stack.viewer.get(path).body.get("chunks", [])
        return any("sleeping" in c["text"] for c in chunks)

    wait_for(started, timeout=45, what="the slow task to log", interval=0.3)
    began = time.monotonic()
    status, _, lines = stack.viewer.stream(path, follow="true", timeout=1.5)
    assert status == 200 and time.monotonic() - began < 10
    assert "sleeping" in lines[0]["text"]
    assert lines[-1]["end"] is True and lines[-1]["reason"] == "timeout", lines[-1]
    marked = stack.operator.post(
        "/dags/rest_slow/runs/slow-1/mark", {"task_ids": ["sleep"], "state": "failed"}
    )
    assert marked.status == 200 and marked.body["marked_task_ids"] == ["sleep"], marked.body
    _wait_states(stack.viewer, "rest_slow", "slow-1", {"sleep": "failed"})


def test_a_hostile_conf_is_refused_naming_the_field(stack: Stack) -> None:
    op = stack.operator
    not_object = _problem(
        op.post("/dags/rest_hello/runs", {"conf": [1, 2]}), 400, "INVALID_ARGUMENT"
    )
    assert not_object["field"] == "conf"
    huge = op.post("/dags/rest_hello/runs", {"conf": {"blob": "x" * 70_000}})
    assert _problem(huge, 400, "INVALID_ARGUMENT")["field"] == "conf"
    deep: Any = 1
    for _ in range(40):
        deep = {"d": deep}
    nested = op.post("/dags/rest_hello/runs", {"conf": deep})
    assert _problem(nested, 400, "INVALID_ARGUMENT")["field"] == "conf"
    very_deep = b'{"conf": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001
    _problem(op.post("/dags/rest_hello/runs", very_deep), 400, "INVALID_ARGUMENT")
    huge_int = b'{"conf": {"a": ' + b"9" * 5000 + b"}}"  # past Python's int-from-text limit
    digits = _problem(op.post("/dags/rest_hello/runs", huge_int), 400, "INVALID_ARGUMENT")
    assert "integers are limited to 19 digits" in digits["message"], digits
    unknown = op.post("/dags/rest_hello/runs", {"conf": {}, "cnof": {}})
    assert _problem(unknown, 400, "INVALID_ARGUMENT")["field"] == "cnof"
    _problem(op.post("/dags/rest_hello/runs", b"{not json"), 400, "INVALID_ARGUMENT")
    form = op.post("/dags/rest_hello/runs", b"a=1", headers={"Content-Type": "text/plain"})
    _problem(form, 415, "UNSUPPORTED_MEDIA_TYPE")
    long_id = op.post("/dags/rest_hello/runs", {"run_id": "r" * 300})
    assert _problem(long_id, 400, "INVALID_ARGUMENT")["field"] == "run_id"
    # nothing of it reached the DAG's runs
    runs = stack.viewer.get("/dags/rest_hello/runs").body["runs"]
    assert all(r["run_id"] != "r" * 300 for r in runs)


def test_backfill(stack: Stack) -> None:
    body = {"start_date": "2024-02-01T00:00:00Z", "end_date": "2024-02-03T00:00:00Z"}
    dry = stack.operator.post("/dags/rest_daily/backfill", {**body, "dry_run": True})
    assert dry.status == 200, dry.body
    assert len(dry.body["runs"]) == 3
    made = stack.operator.post("/dags/rest_daily/backfill", {**body, "conf": {"b": True}})
    assert made.status == 200 and len(made.body["runs"]) == 3, made.body
    for run in made.body["runs"]:
        assert run["run_id"].startswith("backfill__") and run["conf"] == {"b": True}, run
    again = stack.operator.post("/dags/rest_daily/backfill", body)
    assert again.body["runs"] == [] and len(again.body["skipped"]) == 3
    _problem(stack.viewer.post("/dags/rest_daily/backfill", body), 403, "PERMISSION_DENIED")
    missing = stack.operator.post("/dags/rest_daily/backfill", {"start_date": body["start_date"]})
    assert _problem(missing, 400, "INVALID_ARGUMENT")["field"] == "end_date"

    # every run of the DAG, one per page
    headers = {MIN_INDEX: str(made.applied)}
    ids, token = [], ""
    for _ in range(20):
        page = stack.viewer.get(
            "/dags/rest_daily/runs", page_size=1, page_token=token, headers=headers
        )
        ids += [r["run_id"] for r in page.body["runs"]]
        token = page.body["next_page_token"]
        if not token:
            break
    assert {r["run_id"] for r in made.body["runs"]} <= set(ids) and len(ids) == len(set(ids))


# -- import errors, cluster --------------------------------------------------------------------


def test_workers_lists_the_stacks_worker(stack: Stack) -> None:
    from raftsched import __version__

    assert stack.web.worker is not None
    pid = stack.web.worker.pid

    def mine() -> dict[str, Any] | None:
        answer = stack.viewer.get("/workers")
        assert answer.status == 200, answer.body
        return next((w for w in answer.body["workers"] if w["pid"] == pid), None)

    worker = wait_for(mine, timeout=30, what="the stack's worker on /api/v1/workers")
    assert worker["version"] == __version__ and worker["slots_total"] == 2
    assert worker["host"] and worker["last_seen"] and worker["lost_reason"] is None
    assert 0 <= worker["slots_used"] == len(worker["running"]) <= 2
    assert stack.anonymous.get("/workers").status == 401


def test_import_errors_and_cluster_status(stack: Stack) -> None:
    errors = stack.viewer.get("/import-errors")
    assert errors.status == 200, errors.body
    assert [Path(e["fileloc"]).name for e in errors.body["import_errors"]] == ["broken.py"]
    assert errors.body["import_errors"][0]["message"]

    status = stack.viewer.get("/cluster")
    assert status.status == 200, status.body
    assert len(status.body["nodes"]) == 3 and status.body["leader"]
    assert {n["role"] for n in status.body["nodes"]} >= {"leader", "follower"}
    assert status.applied > 0
