"""Issue #9, "no input can stop the cluster", against the real thing: three real scheduler
nodes, a real worker and a real metadata DB (SQLite and PostgreSQL), one cluster per DB shared
by every check of this module.

- Hostile inputs through the gRPC API and through the ``raftsched`` CLI (a subprocess): confs
  nested 500 and 100,000 levels deep, 3 MB and 10 MB confs, confs that are an array or a
  string or carry NUL, 10,000-character and newline-carrying ids, logical dates in years 1 and
  9999, negative and huge numbers, unknown ids. Each is refused with INVALID_ARGUMENT,
  NOT_FOUND or RESOURCE_EXHAUSTED (never INTERNAL or UNKNOWN) in one line that names what was
  wrong; the CLI prints that one line (no traceback) and exits 1 (2 for what it refuses
  itself as a usage error, as documented). A huge ``--timeout`` either works or is refused;
  it never leaves the CLI hanging.
- Tasks that print NUL (stdout and stderr), bytes that are not UTF-8, and a 1,000,000-character
  line: their runs reach the DB with the output sanitized (U+FFFD) and the long line whole
  across chunks of at most 64 KiB.
- After all of it: the 5-second heartbeat DAG keeps getting runs into the DB, the outbox
  drains, the nodes' digests agree at the same applied index, every node is still running,
  and ``raftsched db quarantine list`` shows nothing (a task can no longer make the DB refuse
  a row, so nothing is quarantined).

Every wait has a deadline; nothing asserts a duration.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from api_harness import ADMIN, ApiCluster
from google.protobuf.timestamp_pb2 import Timestamp
from harness import child_env, wait_for

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import (
    cluster_pb2,
    common_pb2,
    dag_pb2,
    user_pb2,
    worker_pb2,
)
from raftsched.errors import ApiError
from raftsched.store import queries
from raftsched.store.tables import dag_run, outbox_quarantine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dags_poison"
HEARTBEAT, TARGET, OUTPUT = "poison_heartbeat", "poison_target", "poison_output"
OUTPUT_TASKS = {"nul", "stderr_nul", "badutf8", "bigline"}
BIG_LINE = 1_000_000
MAX_CHUNK_CHARS = 65_536  # raftsched.core.limits.MAX_LOG_CHUNK_CHARS
MAX_MESSAGE = 4_096  # an error "line" longer than this is not one a person can read

Code = grpc.StatusCode
REFUSED = {Code.INVALID_ARGUMENT, Code.NOT_FOUND, Code.RESOURCE_EXHAUSTED}
INVALID = {Code.INVALID_ARGUMENT}
MISSING = {Code.NOT_FOUND}
INVALID_OR_MISSING = {Code.INVALID_ARGUMENT, Code.NOT_FOUND}

# Words that name a field in a message (any one of them, case-insensitive).
CONF = ("conf",)
RUN_ID = ("run_id", "run id", "run-id")
DAG_ID = ("dag_id", "dag id", "dag ")
TASK_ID = ("task_id", "task id", "task ")
LOGICAL = ("logical_date", "logical date", "logical-date")
RANGE = ("start_date", "end_date", "start date", "end date", "start-date", "end-date")
NOT_FOUND = ("not found",)


# -- hostile values -----------------------------------------------------------------------------


def deep_object(levels: int) -> str:
    """A JSON object nested ``levels`` deep: {"a":{"a":...1...}}."""
    return '{"a":' * levels + "1" + "}" * levels


def deep_array_conf(levels: int) -> str:
    """A JSON object holding an array nested ``levels`` deep (2 bytes a level)."""
    return '{"a":' + "[" * levels + "]" * levels + "}"


def big_conf(size: int) -> str:
    return '{"a":"' + "x" * size + '"}'


def ts(year: int, month: int = 1, day: int = 1) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(datetime(year, month, day, tzinfo=UTC))
    return stamp


def raw_ts(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds)


LONG_ID = "i" * 10_000
HUGE_INT = "9" * 5_000  # past Python's int-from-text limit (4300 digits)
U32_MAX, U64_MAX = (1 << 32) - 1, (1 << 64) - 1


# -- one cluster per database -------------------------------------------------------------------


@dataclass
class Poisoned:
    backend: str
    cluster: ApiCluster
    client: RaftschedClient
    big_client: RaftschedClient  # sends up to 64 MB: the server's own limit answers
    output_run: str

    @property
    def engine(self) -> sa.Engine:
        return self.cluster.engine

    def brief(self) -> Any:
        return self.cluster.brief()


@contextlib.contextmanager
def _database(backend: str, workdir: Path) -> Iterator[str]:
    """A fresh database for the module's cluster (tests/conftest.py does it per test)."""
    if backend == "sqlite":
        yield f"sqlite:///{workdir / 'metadata' / 'raftsched.db'}"
        return
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


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def poisoned(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Poisoned]:
    backend = request.param
    workdir = tmp_path_factory.mktemp(f"poison-{backend}")
    dags = {p.name: p.read_text() for p in sorted(FIXTURES.glob("*.py"))}
    with (
        _database(backend, workdir) as url,
        ApiCluster(workdir, url, dags=dags, lease_ttl=5) as cluster,
    ):
        cluster.start()
        cluster.wait_leader(timeout=60)
        client = cluster.client(deadline=20)
        big = cluster.client(deadline=20, max_message_bytes=64 * 1024 * 1024)
        cluster.wait_dags(client, {HEARTBEAT, TARGET, OUTPUT}, timeout=60)
        cluster.start_worker("w1", concurrency=4)
        # the hostile output runs while the API and CLI checks do
        run = client.dags.TriggerDag(
            dag_pb2.TriggerDagRequest(dag_id=OUTPUT, run_id="poison-output-1")
        ).run.run_id
        state = Poisoned(backend, cluster, client, big, run)
        try:
            yield state
        finally:
            if request.session.testsfailed:
                cluster.print_logs(lines=40)


# -- checking one refusal -----------------------------------------------------------------------


def _grpc_problem(
    name: str,
    call: Callable[[], Any],
    allowed: set[Code],
    words: tuple[str, ...],
    *,
    on_ok: Callable[[Any], None] | None = None,
    ok_if: Callable[[Any], bool] | None = None,
) -> str | None:
    """None when ``call`` is refused as it should be; else what went wrong, in one line."""
    try:
        answer = call()
    except ApiError as err:
        code, message = err.code, err.message
    except Exception as err:  # a client-side failure is a finding too
        return f"{name}: raised {type(err).__name__}: {str(err)[:300]!r}"
    else:
        if on_ok is not None:
            on_ok(answer)
        if ok_if is not None and ok_if(answer):
            return None
        return f"{name}: accepted (OK), expected {sorted(c.name for c in allowed)}"
    problems = []
    if code not in allowed:
        problems.append(f"code {code.name}, expected {sorted(c.name for c in allowed)}")
    if "\n" in message or "\r" in message:
        problems.append("message is more than one line")
    if len(message) > MAX_MESSAGE:
        problems.append(f"message is {len(message)} characters long")
    if words and not any(w in message.lower() for w in words):
        problems.append(f"message does not name {' / '.join(words)}")
    if not problems:
        return None
    return f"{name}: {'; '.join(problems)}: {code.name}: {message[:300]!r}"


def _collect(problems: list[str | None]) -> list[str]:
    return [p for p in problems if p]


def _trigger(client: RaftschedClient, **fields: Any) -> Callable[[], Any]:
    fields.setdefault("dag_id", TARGET)
    return lambda: client.dags.TriggerDag(dag_pb2.TriggerDagRequest(**fields), timeout=20)


# -- 1. the gRPC API ----------------------------------------------------------------------------


def test_hostile_inputs_through_grpc_are_refused(poisoned: Poisoned) -> None:
    c, big = poisoned.client, poisoned.big_client
    d, w = c.dags, c.workers
    key = common_pb2.TaskKey
    leased: list[tuple[str, Any]] = []

    def release_if_leased(worker_id: str) -> Callable[[Any], None]:
        def hand_back(answer: Any) -> None:  # a hostile Lease that got work: give it back
            for lease in answer.leases:
                leased.append((worker_id, lease))
                ref = worker_pb2.LeaseRef(key=lease.key, token=lease.token)
                with contextlib.suppress(ApiError):
                    w.Release(worker_pb2.ReleaseRequest(worker_id=worker_id, leases=[ref]))

        return hand_back

    cases: list[tuple[str, Callable[[], Any], set[Code], tuple[str, ...]]] = [
        # confs
        ("conf 500 levels deep", _trigger(c, conf_json=deep_object(500)), INVALID, CONF),
        ("conf 100,000 levels deep", _trigger(c, conf_json=deep_object(100_000)), INVALID, CONF),
        (
            "conf array 100,000 levels deep",
            _trigger(c, conf_json=deep_array_conf(100_000)),
            INVALID,
            CONF,
        ),
        (  # 60 KB: under the size bound, so only the depth bound can refuse it
            "conf array 30,000 levels deep",
            _trigger(c, conf_json=deep_array_conf(30_000)),
            INVALID,
            CONF,
        ),
        ("conf 3 MB", _trigger(c, conf_json=big_conf(3_000_000)), INVALID, CONF),
        ("conf that is a JSON array", _trigger(c, conf_json="[1, 2]"), INVALID, CONF),
        ("conf that is a JSON string", _trigger(c, conf_json='"a string"'), INVALID, CONF),
        (
            "conf with \\u0000 in a value",
            _trigger(c, conf_json='{"a": "x\\u0000y"}'),
            INVALID,
            CONF,
        ),
        ("conf with \\u0000 in a key", _trigger(c, conf_json='{"k\\u0000": 1}'), INVALID, CONF),
        ("conf with a raw NUL", _trigger(c, conf_json='{"a": "x\x00y"}'), INVALID, CONF),
        ("conf with a lone surrogate", _trigger(c, conf_json='{"a": "\\ud800"}'), INVALID, CONF),
        ("conf with 1e400", _trigger(c, conf_json='{"a": 1e400}'), INVALID, CONF),
        (
            "conf with a 5000-digit int",
            _trigger(c, conf_json=f'{{"a": {HUGE_INT}}}'),
            INVALID,
            CONF,
        ),
        (
            "conf with a -5000-digit int",
            _trigger(c, conf_json=f'{{"a": -{HUGE_INT}}}'),
            INVALID,
            CONF,
        ),
        (
            "conf with a 100-digit int",
            _trigger(c, conf_json=f'{{"a": {"9" * 100}}}'),
            INVALID,
            CONF,
        ),
        (
            "backfill conf 500 levels deep",
            lambda: d.BackfillDag(
                dag_pb2.BackfillDagRequest(
                    dag_id=HEARTBEAT,
                    start_date=ts(2025),
                    end_date=ts(2025),
                    conf_json=deep_object(500),
                    dry_run=True,
                )
            ),
            INVALID,
            CONF,
        ),
        # ids
        ("run_id of 10,000 characters", _trigger(c, run_id=LONG_ID), INVALID, RUN_ID),
        ("run_id with a newline", _trigger(c, run_id="bad\nrun"), INVALID, RUN_ID),
        ("run_id with a NUL", _trigger(c, run_id="bad\x00run"), INVALID, RUN_ID),
        (
            "dag_id of 10,000 characters (trigger)",
            _trigger(c, dag_id=LONG_ID),
            INVALID_OR_MISSING,
            DAG_ID,
        ),
        (
            "dag_id with a newline (trigger)",
            _trigger(c, dag_id="poison\ntarget"),
            INVALID_OR_MISSING,
            DAG_ID,
        ),
        (
            "dag_id of 10,000 characters (GetDag)",
            lambda: d.GetDag(dag_pb2.GetDagRequest(dag_id=LONG_ID)),
            INVALID_OR_MISSING,
            DAG_ID,
        ),
        (
            "dag_id of 10,000 characters (PauseDag)",
            lambda: d.PauseDag(dag_pb2.PauseDagRequest(dag_id=LONG_ID)),
            INVALID_OR_MISSING,
            DAG_ID,
        ),
        (
            "run_id of 10,000 characters (ListTaskInstances)",
            lambda: d.ListTaskInstances(
                dag_pb2.ListTaskInstancesRequest(dag_id=TARGET, run_id=LONG_ID)
            ),
            INVALID_OR_MISSING,
            RUN_ID,
        ),
        (
            "ids of 10,000 characters (GetTaskLog)",
            lambda: list(
                d.GetTaskLog(
                    dag_pb2.GetTaskLogRequest(dag_id=LONG_ID, run_id=LONG_ID, task_id=LONG_ID)
                )
            ),
            INVALID_OR_MISSING,
            DAG_ID + RUN_ID + TASK_ID,
        ),
        (
            "task_ids of 10,000 characters (ClearTasks)",
            lambda: d.ClearTasks(
                dag_pb2.ClearTasksRequest(
                    dag_id=OUTPUT, run_id=poisoned.output_run, task_ids=[LONG_ID]
                )
            ),
            INVALID_OR_MISSING,
            TASK_ID + NOT_FOUND,
        ),
        (
            "request_id of 10,000 characters",
            _trigger(c, run_id="poison-reqid-long", request_id=LONG_ID),
            INVALID,
            ("request_id", "request id"),
        ),
        (
            "request_id with a NUL and a newline",
            _trigger(c, run_id="poison-reqid-nul", request_id="r\x00\nq"),
            INVALID,
            ("request_id", "request id"),
        ),
        (
            "page_token of 10,000 characters",
            lambda: d.ListRuns(dag_pb2.ListRunsRequest(dag_id=HEARTBEAT, page_token=LONG_ID)),
            INVALID,
            ("page_token", "page token"),
        ),
        (
            "page_token with a NUL",
            lambda: d.ListDags(dag_pb2.ListDagsRequest(page_token="\x00\xff")),
            INVALID,
            ("page_token", "page token"),
        ),
        # dates
        (
            "logical_date in year 1",
            _trigger(c, run_id="poison-y1", logical_date=ts(1)),
            INVALID,
            LOGICAL,
        ),
        (
            "logical_date in year 9999",
            _trigger(c, run_id="poison-y9999", logical_date=ts(9999, 12, 31)),
            INVALID,
            LOGICAL,
        ),
        (
            "logical_date past Timestamp's range",
            _trigger(c, run_id="poison-ts-big", logical_date=raw_ts(1 << 40)),
            INVALID,
            LOGICAL,
        ),
        (
            "logical_date before Timestamp's range",
            _trigger(c, run_id="poison-ts-neg", logical_date=raw_ts(-(1 << 40))),
            INVALID,
            LOGICAL,
        ),
        (
            "backfill from year 1 to 9999",
            lambda: d.BackfillDag(
                dag_pb2.BackfillDagRequest(
                    dag_id=HEARTBEAT, start_date=ts(1), end_date=ts(9999, 12, 31), dry_run=True
                )
            ),
            INVALID,
            RANGE,
        ),
        (
            "backfill from year 1 (dry run, a real end)",
            lambda: d.BackfillDag(
                dag_pb2.BackfillDagRequest(
                    dag_id=HEARTBEAT, start_date=ts(1), end_date=ts(2024, 1, 2), dry_run=True
                )
            ),
            INVALID,
            RANGE,
        ),
        # numbers
        (
            "ListDags page_size 2^32-1",
            lambda: d.ListDags(dag_pb2.ListDagsRequest(page_size=U32_MAX)),
            INVALID,
            ("page_size",),
        ),
        (
            "ListDags recent_runs 2^32-1",
            lambda: d.ListDags(dag_pb2.ListDagsRequest(recent_runs=U32_MAX)),
            INVALID,
            ("recent_runs",),
        ),
        (
            "ListRuns page_size 2^32-1",
            lambda: d.ListRuns(dag_pb2.ListRunsRequest(page_size=U32_MAX)),
            INVALID,
            ("page_size",),
        ),
        (
            "GetTaskLog try_number 2^32-1",
            lambda: list(
                d.GetTaskLog(
                    dag_pb2.GetTaskLogRequest(
                        dag_id=OUTPUT, run_id=poisoned.output_run, task_id="nul", try_number=U32_MAX
                    )
                )
            ),
            INVALID_OR_MISSING,
            ("try",),
        ),
        (
            "GetTaskLog after_seq 2^64-1",
            lambda: list(
                d.GetTaskLog(
                    dag_pb2.GetTaskLogRequest(
                        dag_id=OUTPUT, run_id=poisoned.output_run, task_id="nul", after_seq=U64_MAX
                    )
                )
            ),
            INVALID,
            ("after_seq",),
        ),
        (
            "Lease max_tasks 2^32-1",
            lambda: w.Lease(worker_pb2.LeaseRequest(worker_id="hostile", max_tasks=U32_MAX)),
            INVALID,
            ("max_tasks",),
        ),
        *[
            (
                f"Lease wait_seconds {value!r}",
                lambda value=value: w.Lease(
                    worker_pb2.LeaseRequest(worker_id="hostile", max_tasks=1, wait_seconds=value)
                ),
                INVALID,
                ("wait_seconds",),
            )
            for value in (-1.0, math.nan, -math.inf)
        ],
        *[
            (
                f"Lease lease_ttl_seconds {value!r}",
                lambda value=value: w.Lease(
                    worker_pb2.LeaseRequest(
                        worker_id="hostile", max_tasks=1, lease_ttl_seconds=value
                    )
                ),
                INVALID,
                ("lease_ttl",),
            )
            for value in (-5.0, 1e308, math.inf, math.nan)
        ],
        (
            "Heartbeat lease_ttl_seconds -1",
            lambda: w.Heartbeat(
                worker_pb2.HeartbeatRequest(worker_id="hostile", lease_ttl_seconds=-1.0)
            ),
            INVALID,
            ("lease_ttl",),
        ),
        (
            "Heartbeat with 20,000 leases",
            lambda: w.Heartbeat(
                worker_pb2.HeartbeatRequest(
                    worker_id="hostile",
                    leases=[
                        worker_pb2.LeaseRef(key=key(dag_id="d", run_id="r", task_id="t"), token=i)
                        for i in range(20_000)
                    ],
                )
            ),
            INVALID,
            ("leases",),
        ),
        (
            "Complete with token 2^64-1 of an unknown task",
            lambda: w.Complete(
                worker_pb2.CompleteRequest(
                    worker_id="hostile",
                    key=key(dag_id=TARGET, run_id="no-such-run", task_id="noop"),
                    token=U64_MAX,
                    success=True,
                )
            ),
            {Code.NOT_FOUND, Code.INVALID_ARGUMENT, Code.FAILED_PRECONDITION},
            (*RUN_ID, "token", "not found"),
        ),
        (
            "Complete with a 10,000-character NUL message of an unknown task",
            lambda: w.Complete(
                worker_pb2.CompleteRequest(
                    worker_id="hostile",
                    key=key(dag_id=TARGET, run_id="no-such-run", task_id="noop"),
                    token=1,
                    success=False,
                    exit_code=-(1 << 31),
                    message="\x00" * 10_000,
                )
            ),
            {Code.NOT_FOUND, Code.INVALID_ARGUMENT},
            (*RUN_ID, "message", "not found"),
        ),
        (
            "AppendLogs with NUL text and a bad stream",
            lambda: w.AppendLogs(
                worker_pb2.AppendLogsRequest(
                    worker_id="hostile",
                    key=key(dag_id=TARGET, run_id="no-such-run", task_id="noop"),
                    token=1,
                    chunks=[common_pb2.LogText(stream="std\x00out", text="a\x00b")],
                )
            ),
            {Code.NOT_FOUND, Code.INVALID_ARGUMENT},
            ("stream", "not found"),
        ),
        (
            "AppendLogs with 1,000 chunks",
            lambda: w.AppendLogs(
                worker_pb2.AppendLogsRequest(
                    worker_id="hostile",
                    key=key(dag_id=TARGET, run_id="no-such-run", task_id="noop"),
                    token=1,
                    chunks=[common_pb2.LogText(stream="stdout", text="x")] * 1000,
                )
            ),
            {Code.NOT_FOUND, Code.INVALID_ARGUMENT},
            ("chunks", "not found"),
        ),
        (
            "Release with a 10,000-character worker_id",
            lambda: w.Release(worker_pb2.ReleaseRequest(worker_id=LONG_ID)),
            INVALID,
            ("worker_id",),
        ),
        # unknown ids
        (
            "GetDag of an unknown DAG",
            lambda: d.GetDag(dag_pb2.GetDagRequest(dag_id="no_such_dag")),
            MISSING,
            NOT_FOUND,
        ),
        ("TriggerDag of an unknown DAG", _trigger(c, dag_id="no_such_dag"), MISSING, NOT_FOUND),
        (
            "UnpauseDag of an unknown DAG",
            lambda: d.UnpauseDag(dag_pb2.UnpauseDagRequest(dag_id="no_such_dag")),
            MISSING,
            NOT_FOUND,
        ),
        (
            "ListTaskInstances of an unknown run",
            lambda: d.ListTaskInstances(
                dag_pb2.ListTaskInstancesRequest(dag_id=TARGET, run_id="no-such-run")
            ),
            MISSING,
            NOT_FOUND,
        ),
        (
            "GetTaskLog of an unknown run",
            lambda: list(
                d.GetTaskLog(
                    dag_pb2.GetTaskLogRequest(dag_id=TARGET, run_id="no-such-run", task_id="noop")
                )
            ),
            MISSING,
            NOT_FOUND,
        ),
        (
            "GetTaskLog of an unknown task",
            lambda: list(
                d.GetTaskLog(
                    dag_pb2.GetTaskLogRequest(
                        dag_id=OUTPUT, run_id=poisoned.output_run, task_id="no_such_task"
                    )
                )
            ),
            MISSING,
            NOT_FOUND,
        ),
        (
            "ClearTasks of an unknown run",
            lambda: d.ClearTasks(dag_pb2.ClearTasksRequest(dag_id=TARGET, run_id="no-such-run")),
            MISSING,
            NOT_FOUND,
        ),
        (
            "MarkTasks of an unknown run",
            lambda: d.MarkTasks(
                dag_pb2.MarkTasksRequest(
                    dag_id=TARGET,
                    run_id="no-such-run",
                    task_ids=["noop"],
                    state=common_pb2.TASK_STATE_SUCCESS,
                )
            ),
            MISSING,
            NOT_FOUND,
        ),
        (
            "MarkTasks with 20,000 task ids",
            lambda: d.MarkTasks(
                dag_pb2.MarkTasksRequest(
                    dag_id=TARGET,
                    run_id="no-such-run",
                    task_ids=[f"t{i}" for i in range(20_000)],
                    state=common_pb2.TASK_STATE_SUCCESS,
                )
            ),
            INVALID_OR_MISSING,
            TASK_ID + NOT_FOUND,
        ),
        (
            "RemoveNode of an unknown address",
            lambda: c.cluster.RemoveNode(cluster_pb2.RemoveNodeRequest(address="10.255.0.1:1")),
            INVALID_OR_MISSING,
            ("address", "not a member"),
        ),
        (
            "TransferLeadership to a 10,000-character target",
            lambda: c.cluster.TransferLeadership(
                cluster_pb2.TransferLeadershipRequest(target=LONG_ID)
            ),
            INVALID_OR_MISSING,
            ("target",),
        ),
        (
            "CreateUser with a NUL in the username",
            lambda: c.users.CreateUser(
                user_pb2.CreateUserRequest(
                    username="ev\x00il", password="a-long-password", role="viewer"
                )
            ),
            INVALID,
            ("username",),
        ),
        (
            "CreateUser with a NUL in the password",
            lambda: c.users.CreateUser(
                user_pb2.CreateUserRequest(
                    username="nulpass", password="a-long-\x00password", role="viewer"
                )
            ),
            INVALID,
            ("password",),
        ),
    ]
    problems = [_grpc_problem(name, call, allowed, words) for name, call, allowed, words in cases]
    # a filter on a DAG no file defines (any more) finds no run: empty, or NOT_FOUND
    problems.append(
        _grpc_problem(
            "ListRuns of an unknown DAG",
            lambda: d.ListRuns(dag_pb2.ListRunsRequest(dag_id="no_such_dag")),
            MISSING,
            NOT_FOUND,
            ok_if=lambda answer: not answer.runs,
        )
    )

    # a 10 MB conf: past the server's message limit, so gRPC itself refuses it
    problems.append(
        _grpc_problem(
            "conf 10 MB",
            _trigger(big, conf_json=big_conf(10 * 1024 * 1024)),
            {Code.RESOURCE_EXHAUSTED, Code.INVALID_ARGUMENT},
            ("larger than", "conf", "message"),
        )
    )
    # worker ids the DB's String(250) column or a log line cannot hold; a grant is handed back
    for name, worker_id in (
        ("Lease with a 10,000-character worker_id", LONG_ID),
        ("Lease with a worker_id holding a newline", "bad\nworker"),
        ("Lease with a worker_id holding a NUL", "bad\x00worker"),
    ):
        problems.append(
            _grpc_problem(
                name,
                lambda worker_id=worker_id: w.Lease(
                    worker_pb2.LeaseRequest(worker_id=worker_id, max_tasks=1, wait_seconds=0)
                ),
                INVALID,
                ("worker_id",),
                on_ok=release_if_leased(worker_id),
            )
        )
    found = _collect(problems)
    if leased:
        found.append(f"hostile worker ids were granted {len(leased)} lease(s) (handed back)")
    assert not found, f"{len(found)} hostile gRPC calls were not refused properly:\n" + "\n".join(
        found
    )
    _assert_alive(poisoned)


# -- 2. the CLI ---------------------------------------------------------------------------------


CLI_BOUND = 45.0  # seconds a CLI call may take here before it counts as hung


def _cli(
    poisoned: Poisoned,
    *words: str,
    output: str = "json",
    connect: bool = True,
    timeout: str = "20",
) -> tuple[int, str, str]:
    argv = [sys.executable, "-m", "raftsched", "--config", str(poisoned.cluster.config_path)]
    argv += [*words, "--output", output]
    if connect:
        argv += ["--token", ADMIN, "--timeout", timeout]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=CLI_BOUND, env=child_env()
        )
    except OSError as err:  # E2BIG: an argument the kernel refuses
        return -1, "", f"could not start the CLI: {err}"
    except subprocess.TimeoutExpired:
        return -2, "", f"still running after {CLI_BOUND:g}s (killed)"
    return done.returncode, done.stdout, done.stderr


def _cli_problem(
    poisoned: Poisoned,
    name: str,
    words: list[str],
    names: tuple[str, ...],
    *,
    timeout: str = "20",
    ok: bool = False,
) -> str | None:
    """None when the CLI refused as it should (``ok``: or simply did the job, exit 0)."""
    code, out, err = _cli(poisoned, *words, timeout=timeout)
    if ok and code == 0:
        return None
    lines = [line for line in err.splitlines() if line.strip()]
    problems = []
    if "Traceback" in err:
        problems.append("printed a traceback")
    if code == 1:
        if len(lines) != 1:
            problems.append(f"printed {len(lines)} lines on stderr, not one")
    elif code == 2:  # argparse's usage error: the usage, then one error line
        if not lines or "error:" not in lines[-1]:
            problems.append("exit 2 without an error line")
    else:
        problems.append(f"exit {code}, expected 1 (or 2 for a usage error)")
    last = lines[-1] if lines else ""
    for bad in ("INTERNAL", "UNKNOWN", "internal error"):
        if bad in err:
            problems.append(f"says {bad}")
    if names and not any(n in last.lower() for n in names):
        problems.append(f"its error line does not name {' / '.join(names)}")
    if len(last) > MAX_MESSAGE:
        problems.append(f"its error line is {len(last)} characters long")
    if not problems:
        return None
    shown = last[:300] if last else (out[:200] or "<nothing>")
    return f"{name}: {'; '.join(problems)}: exit {code}: {shown!r}"


# The kernel refuses one argument over 128 KiB (MAX_ARG_STRLEN): the CLI's deep and huge confs
# stay under it (the gRPC test sends 100,000 levels and 10 MB).
CLI_DEEP = 65_000
CLI_HUGE = 120_000


def test_hostile_inputs_through_the_cli_are_refused(poisoned: Poisoned) -> None:
    trig = ["dags", "trigger", TARGET]
    cases: list[tuple[str, list[str], tuple[str, ...]]] = [
        ("conf 500 levels deep", [*trig, "--conf", deep_object(500)], CONF),
        (f"conf {CLI_DEEP} levels deep", [*trig, "--conf", deep_array_conf(CLI_DEEP)], CONF),
        ("conf 30,000 levels deep", [*trig, "--conf", deep_array_conf(30_000)], CONF),
        (f"conf of {CLI_HUGE} bytes", [*trig, "--conf", big_conf(CLI_HUGE)], CONF),
        ("conf that is a JSON array", [*trig, "--conf", "[1, 2]"], CONF),
        ("conf that is a JSON string", [*trig, "--conf", '"a string"'], CONF),
        ("conf with \\u0000", [*trig, "--conf", '{"a": "x\\u0000y"}'], CONF),
        ("conf with a 5000-digit int", [*trig, "--conf", f'{{"a": {HUGE_INT}}}'], CONF),
        ("run id of 10,000 characters", [*trig, "--run-id", LONG_ID], RUN_ID),
        ("run id with a newline", [*trig, "--run-id", "bad\nrun"], RUN_ID),
        ("dag id of 10,000 characters (trigger)", ["dags", "trigger", LONG_ID], DAG_ID),
        ("dag id of 10,000 characters (show)", ["dags", "show", LONG_ID], DAG_ID),
        (
            "logical date in year 1",
            [*trig, "--run-id", "cli-y1", "--logical-date", "0001-01-01T00:00:00+00:00"],
            LOGICAL,
        ),
        (
            "logical date in year 1 at +01:00 (before year 1 in UTC)",
            [*trig, "--run-id", "cli-y0", "--logical-date", "0001-01-01T00:00:00+01:00"],
            LOGICAL,
        ),
        (
            "logical date in year 9999",
            [*trig, "--run-id", "cli-y9999", "--logical-date", "9999-12-31T23:59:59+00:00"],
            LOGICAL,
        ),
        (
            "backfill from year 1 to 9999",
            ["dags", "backfill", HEARTBEAT, "-s", "0001-01-01", "-e", "9999-12-31", "--dry-run"],
            RANGE,
        ),
        ("runs list --limit -1", ["runs", "list", HEARTBEAT, "--limit", "-1"], ("limit",)),
        (
            "tasks logs --try 99999999999",
            ["tasks", "logs", OUTPUT, "poison-output-1", "nul", "--try", "99999999999"],
            ("try",),
        ),
        (
            "tasks logs --try -1",
            ["tasks", "logs", OUTPUT, "poison-output-1", "nul", "--try", "-1"],
            ("try",),
        ),
        ("dags show of an unknown DAG", ["dags", "show", "no_such_dag"], NOT_FOUND),
        ("dags pause of an unknown DAG", ["dags", "pause", "no_such_dag"], NOT_FOUND),
        ("dags trigger of an unknown DAG", ["dags", "trigger", "no_such_dag"], NOT_FOUND),
        ("tasks list of an unknown run", ["tasks", "list", TARGET, "no-such-run"], NOT_FOUND),
        (
            "tasks logs of an unknown run",
            ["tasks", "logs", TARGET, "no-such-run", "noop"],
            NOT_FOUND,
        ),
        (
            "tasks clear of an unknown run",
            ["tasks", "clear", TARGET, "no-such-run", "noop"],
            NOT_FOUND,
        ),
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        found = _collect(
            list(pool.map(lambda case: _cli_problem(poisoned, case[0], case[1], case[2]), cases))
        )
        # a huge --timeout: the call does its job, or is refused naming --timeout; never hangs
        found += _collect(
            list(
                pool.map(
                    lambda seconds: _cli_problem(
                        poisoned,
                        f"dags list --timeout {seconds}",
                        ["dags", "list"],
                        ("timeout",),
                        timeout=seconds,
                        ok=True,
                    ),
                    ["1e20", "1e999"],
                )
            )
        )
    assert not found, f"{len(found)} hostile CLI calls were not refused properly:\n" + "\n".join(
        found
    )
    _assert_alive(poisoned)


# -- 3. hostile task output ---------------------------------------------------------------------


def _db_log(poisoned: Poisoned, task_id: str) -> list[queries.LogChunk]:
    return queries.read_log(poisoned.engine, OUTPUT, poisoned.output_run, task_id, 1, limit=100_000)


def test_hostile_task_output_reaches_the_db_sanitized(poisoned: Poisoned) -> None:
    cluster, client, run_id = poisoned.cluster, poisoned.client, poisoned.output_run
    run = cluster.wait_run(client, OUTPUT, run_id, timeout=90)
    states = {k: v.state for k, v in cluster.current(client, OUTPUT, run_id).items()}
    assert run.state == common_pb2.RUN_STATE_SUCCESS, f"{run_id}: {states}"

    # the run and every attempt reach the DB, finished
    def in_db() -> bool:
        row = queries.get_run(poisoned.engine, OUTPUT, run_id)
        rows = queries.list_task_instances(poisoned.engine, OUTPUT, run_id)
        return (
            row is not None
            and row.state == "success"
            and {r.task_id for r in rows if r.state == "success"} == OUTPUT_TASKS
        )

    wait_for(
        in_db,
        timeout=60,
        what=f"run {run_id} and its attempts to reach the DB as success",
        describe=lambda: {
            "run": queries.get_run(poisoned.engine, OUTPUT, run_id),
            "nodes": poisoned.brief(),
        },
    )
    cluster.wait_caught_up(timeout=60)

    texts: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for task_id in sorted(OUTPUT_TASKS):
        chunks = _db_log(poisoned, task_id)
        by_stream: dict[str, str] = {}
        for chunk in chunks:
            by_stream[chunk.stream] = by_stream.get(chunk.stream, "") + chunk.text
            if "\x00" in chunk.text:
                problems.append(f"{task_id}: chunk {chunk.chunk_seq} holds a NUL")
            if any(0xD800 <= ord(ch) <= 0xDFFF for ch in chunk.text):
                problems.append(f"{task_id}: chunk {chunk.chunk_seq} holds a lone surrogate")
            if len(chunk.text) > MAX_CHUNK_CHARS:
                problems.append(
                    f"{task_id}: chunk {chunk.chunk_seq} is {len(chunk.text)} characters"
                    f" (more than {MAX_CHUNK_CHARS})"
                )
        texts[task_id] = by_stream
    if "a\ufffdb" not in texts["nul"].get("stdout", ""):
        problems.append(f"nul: stdout {texts['nul'].get('stdout', '')[:100]!r}, no 'a\\ufffdb'")
    if "e\ufffdf" not in texts["stderr_nul"].get("stderr", ""):
        problems.append(
            f"stderr_nul: stderr {texts['stderr_nul'].get('stderr', '')[:100]!r}, no 'e\\ufffdf'"
        )
    if not re.search("x\ufffd+y", texts["badutf8"].get("stdout", "")):
        problems.append(
            f"badutf8: stdout {texts['badutf8'].get('stdout', '')[:100]!r}, no 'x\\ufffd...y'"
        )
    big = texts["bigline"].get("stdout", "")
    runs_of_x = [len(m) for m in re.findall("x+", big)]
    if runs_of_x != [BIG_LINE] or big.strip("\n") != "x" * BIG_LINE:
        problems.append(
            f"bigline: {len(big)} characters on stdout, runs of x {runs_of_x[:5]}"
            f" (wanted one line of {BIG_LINE}); starts {big[:60]!r}"
        )
    assert not problems, "\n".join(problems)

    # and the API serves the same sanitized text
    served = "".join(
        chunk.text
        for chunk in client.dags.GetTaskLog(
            dag_pb2.GetTaskLogRequest(dag_id=OUTPUT, run_id=run_id, task_id="nul")
        )
    )
    assert "a\ufffdb" in served, served[:200]
    _assert_alive(poisoned)


# -- 4. after all of it -------------------------------------------------------------------------


def _heartbeat_rows(poisoned: Poisoned) -> int:
    with poisoned.engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).where(
                    dag_run.c.dag_id == HEARTBEAT, dag_run.c.state == "success"
                )
            ).scalar_one()
        )


def _cli_status(poisoned: Poisoned) -> list[dict[str, Any]] | None:
    code, out, _ = _cli(poisoned, "cluster", "status")
    if code != 0:
        return None
    try:
        return list(json.loads(out)["nodes"])
    except (ValueError, KeyError, TypeError):
        return None


def test_the_cluster_keeps_working_after_all_of_it(poisoned: Poisoned) -> None:
    cluster = poisoned.cluster
    # heartbeat runs keep reaching the DB: the count of finished ones grows across a window
    before = _heartbeat_rows(poisoned)
    wait_for(
        lambda: _heartbeat_rows(poisoned) >= before + 2,
        timeout=45,
        what=f"two more successful {HEARTBEAT} runs in the DB (had {before})",
        interval=0.5,
        describe=lambda: {"rows": _heartbeat_rows(poisoned), "nodes": poisoned.brief()},
    )

    # the outbox drains: `cluster status` shows every node's backlog back near 0
    def drained() -> bool:
        nodes = _cli_status(poisoned)
        return bool(nodes) and all(
            n.get("role") in ("leader", "follower") and int(n.get("outbox_backlog") or 0) <= 5
            for n in nodes or []
        )

    wait_for(
        drained,
        timeout=45,
        what="every node's outbox backlog back to ~0 in `cluster status`",
        interval=0.5,
        describe=lambda: _cli_status(poisoned),
    )
    cluster.wait_caught_up(timeout=45)

    # replicas agree: nodes seen at the same applied index report the same digest
    wait_for(
        lambda: cluster.recorder.digest_comparisons() >= 1,
        timeout=30,
        what="a digest index seen on two nodes or more",
        describe=cluster.digest_samples,
    )
    cluster.assert_replicas_agree(min_comparisons=1)
    _assert_alive(poisoned)

    # no refused trigger created a run (every call aimed at the target DAG was hostile)
    with poisoned.engine.connect() as conn:
        created = conn.execute(
            sa.select(dag_run.c.run_id, dag_run.c.logical_date).where(dag_run.c.dag_id == TARGET)
        ).all()
    live = poisoned.client.dags.ListRuns(dag_pb2.ListRunsRequest(dag_id=TARGET)).runs
    assert not created and not live, (
        f"hostile triggers created runs: {[r.run_id for r in created]} {[r.run_id for r in live]}"
    )

    # nothing was quarantined: a task can no longer make the DB refuse a row
    code, out, err = _cli(poisoned, "db", "quarantine", "list", connect=False)
    code_args = ["db", "quarantine", "list"]
    if code == 2 and "invalid choice" in err:
        pytest.fail(f"`raftsched {' '.join(code_args)}` does not exist yet: {err.strip()[-300:]}")
    assert code == 0, f"`raftsched {' '.join(code_args)}` exited {code}: {err.strip()[-500:]}"
    assert _empty_listing(json.loads(out)), f"quarantined entries: {out[:2000]}"
    with poisoned.engine.connect() as conn:
        parked = conn.execute(sa.select(sa.func.count()).select_from(outbox_quarantine))
        assert parked.scalar_one() == 0


def _empty_listing(payload: Any) -> bool:
    """True when a JSON listing holds no entry (a list, or an object whose lists are empty)."""
    if isinstance(payload, list):
        return not payload
    if isinstance(payload, dict):
        lists = [v for v in payload.values() if isinstance(v, list)]
        counts = [v for k, v in payload.items() if k in ("count", "total", "total_size")]
        return bool(lists or counts) and all(not v for v in lists) and all(v == 0 for v in counts)
    return False


def _assert_alive(poisoned: Poisoned) -> None:
    dead = [
        f"node {n.index} ({n.address}) exited {n.proc.returncode if n.proc else None}"
        for n in poisoned.cluster.nodes
        if not n.alive
    ]
    dead += [
        f"worker {name} exited" for name, wp in poisoned.cluster.workers.items() if not wp.alive
    ]
    assert not dead, f"processes died: {dead}; {poisoned.brief()}"
