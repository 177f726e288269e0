"""Issue #9: no input a client can send stops the cluster or answers INTERNAL.

Every RPC of every servicer is called with hostile values (deep and huge JSON, NUL, lone
surrogates, control characters, 10k-character ids, dates at year 1 and 9999, negative, huge
and non-finite numbers, unknown ids). Each call must answer (or be refused) with a status
other than INTERNAL/UNKNOWN, and a refusal must name the field. Then every command that was
proposed must be within ``raftsched.core.limits`` (clean text, ids of at most 250 characters,
dates in range) and the outbox must materialize into the metadata DB, PostgreSQL included
(which refuses NUL in text).

The servicers are the real ones, over a real SchedulerState and a real migrated DB; only the
Raft node and the proposer are stand-ins that apply each command at once. Lone surrogates
cannot be put in a protobuf message (the Python runtime refuses them, and the server answers
INVALID_ARGUMENT for bytes that are not UTF-8: see ``decoding``), so they are sent in
duck-typed requests straight to the servicers.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy.engine import Engine
from test_state_harness import Sim, dag, task

from raftsched.api.gen import cluster_pb2, common_pb2, dag_pb2, user_pb2, worker_pb2
from raftsched.api.servicers import bounds
from raftsched.api.servicers.cluster import ClusterServicer
from raftsched.api.servicers.context import ApiContext
from raftsched.api.servicers.dags import DagServicer
from raftsched.api.servicers.users import UserServicer
from raftsched.api.servicers.workers import QueueSignal, WorkerServicer
from raftsched.api.status import OUTBOX_FULL, raise_for_result, status_of
from raftsched.core import commands as c
from raftsched.core import limits
from raftsched.core import results as r
from raftsched.core.model import RunType
from raftsched.errors import LimitExceeded, OutboxFull
from raftsched.store.materializer import Materializer

HUGE = "x" * 10_000
NUL = "a\x00b"
SURROGATE = "a\ud800b"
CONTROL = "a\nb"
BAD_TEXTS = {"huge": HUGE, "nul": NUL, "surrogate": SURROGATE, "control": CONTROL}
DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 400 + "1" + "}" * 400
BAD_CONFS = {
    "deep-array": DEEP_ARRAY,
    "deep-object": DEEP_OBJECT,
    "deep-in-string-ok-but-huge": '{"a": "' + "[" * 200_000 + '"}',
    "huge": '{"a": "' + "x" * 200_000 + '"}',
    "array": "[1, 2]",
    "not-json": "{nope",
    "infinity": '{"a": 1e999}',
    "nan": '{"a": NaN}',
    "big-int": '{"a": ' + "9" * 400 + "}",
    "nul-escape": '{"a": "x\\u0000y"}',
    "surrogate-escape": '{"a": "\\ud800"}',
    "nul-key": '{"\\u0000": 1}',
    "raw-nul": '{"a": "x\x00y"}',
}
YEAR_1 = Timestamp(seconds=-62135596800)
YEAR_9999 = Timestamp(seconds=253402300799, nanos=999_999_999)
NOT_A_DATE = Timestamp(seconds=10**15)
BAD_NANOS = Timestamp(seconds=0, nanos=-5)
BAD_DATES = {"year-1": YEAR_1, "year-9999": YEAR_9999, "too-far": NOT_A_DATE, "nanos": BAD_NANOS}
FORBIDDEN = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)


# -- stand-ins for the Raft node, the proposer and the call's context --------------------------


class Node:
    """The parts of SchedulerNode the servicers use, over one SchedulerState."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.lock = threading.RLock()
        self.leader_address = "127.0.0.1:7101"
        self.quorum = True
        self.settings = SimpleNamespace(self_address="127.0.0.1:7101")

    def read(self, fn: Callable[[Any], Any]) -> Any:
        with self.lock:
            return fn(self.sim.state)

    def peers(self) -> dict[str, bool]:
        return {}


class Proposer:
    """Applies each command at once at the next log index; keeps what was proposed."""

    deadline = 5.0

    def __init__(self, node: Node) -> None:
        self.node = node
        self.proposed: list[c.Command] = []
        self.answer: r.Result | None = None  # set: answer it instead of applying

    def make(self, cls: type[c.Command], **fields: Any) -> c.Command:
        return cls(now=datetime.now(UTC), **fields)

    def propose(self, command: c.Command, deadline: float | None = None) -> r.Result:
        self.proposed.append(command)
        if self.answer is not None:
            return self.answer
        with self.node.lock:
            return self.node.sim.apply(command)


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class Context:
    def is_active(self) -> bool:
        return True

    def time_remaining(self) -> float | None:
        return 1.5  # a long poll waits at most 0.5 s

    def code(self) -> grpc.StatusCode | None:
        return None

    def invocation_metadata(self) -> tuple[Any, ...]:
        return ()

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


class Fake:
    """A request message with some fields replaced by values protobuf cannot hold."""

    def __init__(self, pb: Any, /, **fields: Any) -> None:
        self._message = pb
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        if name in self._fields:
            return self._fields[name]
        return getattr(self._message, name)

    def HasField(self, name: str) -> bool:
        return name in self._fields or self._message.HasField(name)


def key(dag_id: str = "d", run_id: str = "r1", task_id: str = "t") -> SimpleNamespace:
    return SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id)


class Api:
    def __init__(self, engine: Engine) -> None:
        self.sim = Sim()
        self.sim.register(dag("d", task("t"), task("u", "t")))
        self.node = Node(self.sim)
        self.proposer = Proposer(self.node)
        api = SimpleNamespace(max_conf_bytes=65536, tls_cert=None, tls_ca=None)
        self.ctx = ApiContext(
            node=self.node,  # type: ignore[arg-type]
            proposer=self.proposer,  # type: ignore[arg-type]
            api=api,  # type: ignore[arg-type]
            engine=engine,
            default_lease_ttl=30.0,
        )
        self.dags = DagServicer(self.ctx)
        self.workers = WorkerServicer(self.ctx, QueueSignal(self.node))
        self.users = UserServicer(self.ctx)
        self.cluster = ClusterServicer(self.ctx)
        self.engine = engine

    def call(self, method: Callable[[Any, Any], Any], request: Any) -> tuple[Any, Aborted | None]:
        """(answer, None) or (None, the refusal). Anything else escaping fails the test."""
        try:
            answer = method(request, Context())
            if hasattr(answer, "__next__"):
                answer = list(answer)
            return answer, None
        except Aborted as err:
            assert err.code not in FORBIDDEN, f"{method.__name__}: {err}"
            return None, err

    def refused(self, method: Callable[[Any, Any], Any], request: Any, field: str) -> Aborted:
        answer, err = self.call(method, request)
        assert err is not None, f"{method.__name__} accepted {field}: {answer}"
        assert err.code in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ), err
        assert field in err.details, f"{method.__name__}: {field!r} not named in {err.details!r}"
        return err

    def materialize(self) -> None:
        materializer = Materializer(self.engine)
        with self.node.lock:
            entries = self.sim.state.outbox_after(materializer.watermark(), 1_000_000)
        acked = materializer.write(entries)
        with self.node.lock:
            self.sim.apply(
                c.AckMaterialized(request_id=self.sim.rid(), now=datetime.now(UTC), seq=acked)
            )

    def close(self) -> None:
        self.cluster.close()


@pytest.fixture
def api(db_engine: Engine) -> Any:
    instance = Api(db_engine)
    yield instance
    instance.close()


# -- the property every proposed command must have -------------------------------------------


def check_bounded(value: Any, path: str = "command") -> None:
    """Every text clean, every id within 250, every date in range, every int within 64 bits."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            assert limits.is_clean(item), f"{where} is not clean: {item[:80]!r}"
            if where.endswith(("_id", "dag_id", "run_id", "task_id")):
                assert len(item) <= limits.MAX_ID_CHARS, f"{where}: {len(item)} characters"
        elif isinstance(item, datetime):
            assert limits.MIN_DATE <= item <= limits.MAX_DATE, f"{where}: {item}"
        elif isinstance(item, bool) or item is None:
            pass
        elif isinstance(item, int):
            assert abs(item) <= limits.MAX_JSON_INT, f"{where}: {item}"
        elif isinstance(item, float):
            assert math.isfinite(item), f"{where}: {item}"
        elif dataclasses.is_dataclass(item):
            for f in dataclasses.fields(item):
                stack.append((getattr(item, f.name), f"{where}.{f.name}"))
        elif isinstance(item, dict):
            for k, v in item.items():
                stack.append((k, f"{where}{{key}}"))
                stack.append((v, f"{where}[{k!r}]"))
        elif isinstance(item, tuple | list):
            for i, v in enumerate(item):
                stack.append((v, f"{where}[{i}]"))
        else:
            assert not isinstance(item, bytes), f"{where}: bytes"


# -- DagService ----------------------------------------------------------------------------------


def test_ids_of_every_dag_rpc_are_bounded(api: Api) -> None:
    d = api.dags
    for name, bad in BAD_TEXTS.items():
        requests: list[tuple[Callable[..., Any], Any, str]] = [
            (d.GetDag, Fake(dag_pb2.GetDagRequest(), dag_id=bad), "dag_id"),
            (d.PauseDag, Fake(dag_pb2.PauseDagRequest(), dag_id=bad), "dag_id"),
            (d.UnpauseDag, Fake(dag_pb2.UnpauseDagRequest(), dag_id=bad), "dag_id"),
            (d.PauseDag, Fake(dag_pb2.PauseDagRequest(dag_id="d"), request_id=bad), "request_id"),
            (d.TriggerDag, Fake(dag_pb2.TriggerDagRequest(), dag_id=bad), "dag_id"),
            (d.TriggerDag, Fake(dag_pb2.TriggerDagRequest(dag_id="d"), run_id=bad), "run_id"),
            (
                d.TriggerDag,
                Fake(dag_pb2.TriggerDagRequest(dag_id="d"), request_id=bad),
                "request_id",
            ),
            (d.BackfillDag, Fake(dag_pb2.BackfillDagRequest(), dag_id=bad), "dag_id"),
            (d.ListRuns, Fake(dag_pb2.ListRunsRequest(), dag_id=bad), "dag_id"),
            (d.ListTaskInstances, Fake(dag_pb2.ListTaskInstancesRequest(), dag_id=bad), "dag_id"),
            (
                d.ListTaskInstances,
                Fake(dag_pb2.ListTaskInstancesRequest(dag_id="d"), run_id=bad),
                "run_id",
            ),
            (d.ClearTasks, Fake(dag_pb2.ClearTasksRequest(run_id="r"), dag_id=bad), "dag_id"),
            (d.ClearTasks, Fake(dag_pb2.ClearTasksRequest(dag_id="d"), run_id=bad), "run_id"),
            (
                d.ClearTasks,
                Fake(dag_pb2.ClearTasksRequest(dag_id="d", run_id="r"), task_ids=["t", bad]),
                "task_ids[1]",
            ),
            (
                d.MarkTasks,
                Fake(dag_pb2.MarkTasksRequest(dag_id="d", run_id="r", state=4), task_ids=[bad]),
                "task_ids[0]",
            ),
            (
                d.GetTaskLog,
                Fake(dag_pb2.GetTaskLogRequest(dag_id="d", run_id="r"), task_id=bad),
                "task_id",
            ),
        ]
        if name != "control":  # a newline is fine in a search text or a tag filter
            requests.append((d.ListDags, Fake(dag_pb2.ListDagsRequest(), search=bad), "search"))
            requests.append((d.ListDags, Fake(dag_pb2.ListDagsRequest(), tags=[bad]), "tags[0]"))
        for method, request, field in requests:
            api.refused(method, request, field)
    assert api.proposer.proposed == []


def test_conf_of_trigger_and_backfill_is_bounded(api: Api) -> None:
    now = datetime.now(UTC)
    start = Timestamp()
    start.FromDatetime(now - timedelta(days=3))
    end = Timestamp()
    end.FromDatetime(now - timedelta(days=1))
    for text in BAD_CONFS.values():
        trigger = dag_pb2.TriggerDagRequest(dag_id="d", conf_json=text)
        api.refused(api.dags.TriggerDag, trigger, "conf_json")
        backfill = dag_pb2.BackfillDagRequest(
            dag_id="d", conf_json=text, start_date=start, end_date=end
        )
        api.refused(api.dags.BackfillDag, backfill, "conf_json")
    assert api.proposer.proposed == []
    # Just within the bounds: accepted.
    depth = limits.MAX_CONF_DEPTH - 1
    ok = '{"a": ' * depth + "1" + "}" * depth
    answer, err = api.call(api.dags.TriggerDag, dag_pb2.TriggerDagRequest(dag_id="d", conf_json=ok))
    assert err is None and answer.run.conf_json.count("{") == depth


def test_dates_of_trigger_and_backfill_are_in_range(api: Api) -> None:
    for name, stamp in BAD_DATES.items():
        trigger = dag_pb2.TriggerDagRequest(dag_id="d", run_id=f"r-{name}")
        trigger.logical_date.CopyFrom(stamp)
        api.refused(api.dags.TriggerDag, trigger, "logical_date")
        good = Timestamp()
        good.FromDatetime(datetime(2024, 1, 1, tzinfo=UTC))
        for field in ("start_date", "end_date"):
            request = dag_pb2.BackfillDagRequest(dag_id="d", start_date=good, end_date=good)
            getattr(request, field).CopyFrom(stamp)
            _, err = api.call(api.dags.BackfillDag, request)
            assert err is not None and err.code == grpc.StatusCode.INVALID_ARGUMENT, err
    missing = dag_pb2.BackfillDagRequest(dag_id="d")
    api.refused(api.dags.BackfillDag, missing, "start_date")
    assert api.proposer.proposed == []
    # The range's ends are accepted: a manual run at 1900-01-01 and one at 2999-12-31.
    for when in (limits.MIN_DATE, limits.MAX_DATE):
        request = dag_pb2.TriggerDagRequest(dag_id="d")
        request.logical_date.FromDatetime(when)
        answer, err = api.call(api.dags.TriggerDag, request)
        assert err is None, err
        assert answer.run.logical_date.ToDatetime(tzinfo=UTC) == when


def test_numbers_and_filters_of_dag_reads_are_bounded(api: Api) -> None:
    d = api.dags
    api.refused(d.ListDags, dag_pb2.ListDagsRequest(page_size=2**32 - 1), "page_size")
    api.refused(d.ListDags, dag_pb2.ListDagsRequest(recent_runs=2**32 - 1), "recent_runs")
    api.refused(d.ListDags, dag_pb2.ListDagsRequest(tags=["t"] * 1000), "tags")
    api.refused(d.ListDags, dag_pb2.ListDagsRequest(page_token=HUGE), "page_token")
    api.refused(d.ListRuns, dag_pb2.ListRunsRequest(page_size=2**32 - 1), "page_size")
    api.refused(d.ListRuns, dag_pb2.ListRunsRequest(states=[1] * 1000), "states")
    api.refused(d.ListRuns, dag_pb2.ListRunsRequest(states=[99]), "states[0]")
    api.refused(d.ListRuns, dag_pb2.ListRunsRequest(run_type=99), "run_type")
    for token in (HUGE, "%%%", "W10=", _cursor("9999-12-31T23:59:59.999999+00:00"), _cursor("x")):
        api.refused(d.ListRuns, dag_pb2.ListRunsRequest(page_token=token), "page_token")
    log = dag_pb2.GetTaskLogRequest(dag_id="d", run_id="r", task_id="t", after_seq=2**64 - 1)
    api.refused(d.GetTaskLog, log, "after_seq")
    log = dag_pb2.GetTaskLogRequest(dag_id="d", run_id="r", task_id="t", try_number=2**32 - 1)
    api.refused(d.GetTaskLog, log, "try_number")
    mark = dag_pb2.MarkTasksRequest(dag_id="d", run_id="r", task_ids=["t"], state=99)
    api.refused(d.MarkTasks, mark, "state")
    many = dag_pb2.ClearTasksRequest(dag_id="d", run_id="r", task_ids=["t"] * 10_001)
    api.refused(d.ClearTasks, many, "task_ids")
    # Unknown ids are NOT_FOUND, not INTERNAL.
    for method, request in [
        (d.GetDag, dag_pb2.GetDagRequest(dag_id="nope")),
        (d.TriggerDag, dag_pb2.TriggerDagRequest(dag_id="nope")),
        (d.ListTaskInstances, dag_pb2.ListTaskInstancesRequest(dag_id="d", run_id="nope")),
        (d.ClearTasks, dag_pb2.ClearTasksRequest(dag_id="d", run_id="nope")),
        (d.GetTaskLog, dag_pb2.GetTaskLogRequest(dag_id="d", run_id="nope", task_id="t")),
    ]:
        _, err = api.call(method, request)
        assert err is not None and err.code == grpc.StatusCode.NOT_FOUND, err


def _cursor(date: str) -> str:
    import base64
    import json

    return base64.urlsafe_b64encode(json.dumps([date, "d", "r"]).encode()).decode()


# -- WorkerService ---------------------------------------------------------------------------


def lease_one(api: Api) -> worker_pb2.TaskLease:
    answer, err = api.call(api.dags.TriggerDag, dag_pb2.TriggerDagRequest(dag_id="d"))
    assert err is None, err
    answer, err = api.call(api.workers.Lease, worker_pb2.LeaseRequest(worker_id="w1", max_tasks=1))
    assert err is None and len(answer.leases) == 1, (answer, err)
    return answer.leases[0]


def test_log_chunks_are_sanitized_and_bounded(api: Api) -> None:
    lease = lease_one(api)
    pb_key = lease.key
    text_key = key(pb_key.dag_id, pb_key.run_id, pb_key.task_id)
    odd = [
        SimpleNamespace(stream="stdout", text="a\x00b"),
        SimpleNamespace(stream="stderr", text="c\ud800d"),
        SimpleNamespace(stream="stdout", text="x" * limits.MAX_LOG_CHUNK_CHARS),
    ]
    request = Fake(
        worker_pb2.AppendLogsRequest(worker_id="w1", token=lease.token), key=text_key, chunks=odd
    )
    _, err = api.call(api.workers.AppendLogs, request)
    assert err is None, err
    appended = api.proposer.proposed[-1]
    assert isinstance(appended, c.AppendLogs)
    assert [ch.text[:3] for ch in appended.chunks] == ["a\ufffdb", "c\ufffdd", "xxx"]
    # Too big or too many chunks: refused, naming the chunk.
    big = [SimpleNamespace(stream="stdout", text="x" * (limits.MAX_LOG_CHUNK_CHARS + 1))]
    request = Fake(
        worker_pb2.AppendLogsRequest(worker_id="w1", token=lease.token), key=text_key, chunks=big
    )
    api.refused(api.workers.AppendLogs, request, "chunks[0].text")
    many = worker_pb2.AppendLogsRequest(worker_id="w1", key=pb_key, token=lease.token)
    many.chunks.extend(
        common_pb2.LogText(stream="stdout", text="x")
        for _ in range(limits.MAX_LOG_CHUNKS_PER_CALL + 1)
    )
    api.refused(api.workers.AppendLogs, many, "chunks")
    bad_stream = worker_pb2.AppendLogsRequest(worker_id="w1", key=pb_key, token=lease.token)
    bad_stream.chunks.append(common_pb2.LogText(stream="stdin", text="x"))
    api.refused(api.workers.AppendLogs, bad_stream, "chunks[0].stream")
    # The outcome message is cut and cleaned, never refused.
    complete = Fake(
        worker_pb2.CompleteRequest(worker_id="w1", token=lease.token, success=False, exit_code=3),
        key=text_key,
        message="boom\x00" + "\ud800" + "y" * 100_000,
        chunks=[SimpleNamespace(stream="stderr", text="last\x00words")],
    )
    _, err = api.call(api.workers.Complete, complete)
    assert err is None, err
    done = api.proposer.proposed[-1]
    assert isinstance(done, c.CompleteAttempt)
    assert len(done.message) <= limits.MAX_MESSAGE_CHARS
    assert done.message.startswith("boom\ufffd\ufffdyyy")
    assert done.chunks[0].text == "last\ufffdwords"
    for command in api.proposer.proposed:
        check_bounded(command)
    api.materialize()  # PostgreSQL refuses NUL in text: nothing of it reached the outbox


def test_every_worker_rpc_refuses_hostile_fields(api: Api) -> None:
    w = api.workers
    for bad in BAD_TEXTS.values():
        api.refused(w.Lease, Fake(worker_pb2.LeaseRequest(max_tasks=1), worker_id=bad), "worker_id")
        api.refused(
            w.Lease,
            Fake(worker_pb2.LeaseRequest(worker_id="w", max_tasks=1), request_id=bad),
            "request_id",
        )
        api.refused(w.Heartbeat, Fake(worker_pb2.HeartbeatRequest(), worker_id=bad), "worker_id")
        refs = [SimpleNamespace(key=key(task_id=bad), token=1)]
        api.refused(
            w.Heartbeat,
            Fake(worker_pb2.HeartbeatRequest(worker_id="w"), leases=refs),
            "leases[0].key.task_id",
        )
        api.refused(
            w.Release,
            Fake(worker_pb2.ReleaseRequest(worker_id="w"), leases=refs),
            "leases[0].key.task_id",
        )
        for part in ("dag_id", "run_id", "task_id"):
            bad_key = key(**{part: bad})
            api.refused(
                w.Complete,
                Fake(worker_pb2.CompleteRequest(worker_id="w1"), key=bad_key),
                f"key.{part}",
            )
            api.refused(
                w.AppendLogs,
                Fake(worker_pb2.AppendLogsRequest(worker_id="w1"), key=bad_key),
                f"key.{part}",
            )
    assert api.proposer.proposed == []
    lease = worker_pb2.LeaseRequest
    api.refused(w.Lease, lease(worker_id="w", max_tasks=0), "max_tasks")
    api.refused(w.Lease, lease(worker_id="w", max_tasks=2**32 - 1), "max_tasks")
    for ttl in (-1.0, 0.5, math.inf, math.nan, 1e308):
        api.refused(w.Lease, lease(worker_id="w", max_tasks=1, lease_ttl_seconds=ttl), "lease_ttl")
        api.refused(
            w.Heartbeat, worker_pb2.HeartbeatRequest(worker_id="w", lease_ttl_seconds=ttl), "ttl"
        )
    for wait in (-1.0, math.nan):
        api.refused(w.Lease, lease(worker_id="w", max_tasks=1, wait_seconds=wait), "wait_seconds")
    key_pb = common_pb2.TaskKey(dag_id="d", run_id="r", task_id="t")
    api.refused(
        w.Complete, worker_pb2.CompleteRequest(worker_id="w1", key=key_pb, token=2**64 - 1), "token"
    )
    api.refused(
        w.AppendLogs,
        worker_pb2.AppendLogsRequest(worker_id="w1", key=key_pb, token=2**64 - 1),
        "token",
    )
    many = worker_pb2.HeartbeatRequest(worker_id="w")
    many.leases.extend(
        worker_pb2.LeaseRef(key=key_pb, token=1) for _ in range(limits.MAX_ITEMS_PER_COMMAND + 1)
    )
    api.refused(w.Heartbeat, many, "leases")
    assert api.proposer.proposed == []
    # An infinite wait is capped, not refused; unknown leases are refused per lease.
    answer, err = api.call(w.Lease, lease(worker_id="w", max_tasks=1, wait_seconds=math.inf))
    assert err is None and not answer.leases
    unknown = worker_pb2.CompleteRequest(worker_id="w", key=key_pb, token=7, success=True)
    _, err = api.call(w.Complete, unknown)
    assert err is not None and err.code in (
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
    )


def test_outbox_full_and_invalid_answers_map_to_their_status(api: Api) -> None:
    lease = lease_one(api)
    api.proposer.answer = r.Result(False, OUTBOX_FULL)
    appended = worker_pb2.AppendLogsRequest(worker_id="w1", key=lease.key, token=lease.token)
    appended.chunks.append(common_pb2.LogText(stream="stdout", text="x"))
    err = api.refused(api.workers.AppendLogs, appended, "outbox")
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.details == str(
        OutboxFull(limits.OUTBOX_HARD_CAP_ENTRIES, limits.OUTBOX_HARD_CAP_ENTRIES)
    )
    err = api.refused(
        api.workers.Lease, worker_pb2.LeaseRequest(worker_id="w", max_tasks=1), "outbox"
    )
    assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    api.proposer.answer = r.Result(False, OUTBOX_FULL, (250_000, 200_000))
    err = api.refused(api.workers.AppendLogs, appended, "250000 entries (hard cap 200000)")
    api.proposer.answer = r.Result(False, OUTBOX_FULL, 123_456)  # what apply answers
    cap = limits.OUTBOX_HARD_CAP_ENTRIES
    err = api.refused(api.workers.AppendLogs, appended, f"123456 entries (hard cap {cap})")
    api.proposer.answer = r.Result(False, r.INVALID, "conf is nested deeper than 32 levels")
    err = api.refused(api.dags.TriggerDag, dag_pb2.TriggerDagRequest(dag_id="d"), "conf")
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT


def test_status_of_limit_exceeded_and_outbox_full() -> None:
    code, message = status_of(LimitExceeded("run_id", "is 300 characters long", limit=250))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message == "run_id is 300 characters long"
    code, message = status_of(OutboxFull(5, 4))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "hard cap 4" in message
    item = r.Item(False, r.INVALID, LimitExceeded("conf", "is too deep"))
    with pytest.raises(Exception, match="invalid request: conf is too deep"):
        raise_for_result(item)


# -- UserService and ClusterService ------------------------------------------------------------


def test_user_rpcs_refuse_hostile_names_and_passwords(api: Api) -> None:
    u = api.users
    for bad in BAD_TEXTS.values():
        api.refused(
            u.CreateUser,
            Fake(user_pb2.CreateUserRequest(password="p" * 8, role="viewer"), username=bad),
            "username",
        )
        answer, err = api.call(
            u.VerifyUser, Fake(user_pb2.VerifyUserRequest(password="p" * 8), username=bad)
        )
        assert err is None and not answer.ok
        answer, err = api.call(
            u.VerifyUser, Fake(user_pb2.VerifyUserRequest(username="bob"), password=bad)
        )
        assert err is None and not answer.ok
        if bad is not CONTROL:
            api.refused(u.DeleteUser, Fake(user_pb2.DeleteUserRequest(), username=bad), "username")
    for bad in (NUL, SURROGATE, "p" * 2000):
        api.refused(
            u.CreateUser,
            Fake(user_pb2.CreateUserRequest(username="bob", role="viewer"), password=bad),
            "password",
        )
    api.refused(
        u.CreateUser,
        user_pb2.CreateUserRequest(username="bob", password="p" * 8, role=HUGE),
        "role",
    )


def test_cluster_rpcs_refuse_hostile_addresses(api: Api) -> None:
    k = api.cluster
    for bad in (*BAD_TEXTS.values(), "host", "host:99999", "h:\u0661\u0662", "é:1", "a b:1"):
        for method, request in [
            (k.AddNode, Fake(cluster_pb2.AddNodeRequest(), address=bad)),
            (k.RemoveNode, Fake(cluster_pb2.RemoveNodeRequest(), address=bad)),
            (k.TransferLeadership, Fake(cluster_pb2.TransferLeadershipRequest(), target=bad)),
        ]:
            field = "target" if method == k.TransferLeadership else "address"
            api.refused(method, request, field)
    request = Fake(cluster_pb2.AddNodeRequest(address="127.0.0.1:9"), request_id=NUL)
    api.refused(k.AddNode, request, "request_id")


# -- bounds helpers --------------------------------------------------------------------------


def test_bounds_conf_refuses_deep_json_without_recursing() -> None:
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)  # json.loads would hit it; the bracket scan does not recurse
    try:
        with pytest.raises(
            LimitExceeded, match=f"conf_json is nested deeper than {limits.MAX_CONF_DEPTH}"
        ):
            bounds.conf("[" * 20_000 + "]" * 20_000, 65536)
    finally:
        sys.setrecursionlimit(limit)
    assert bounds.conf("  ", 65536) == {}
    with pytest.raises(LimitExceeded, match=r"max_conf_bytes"):
        bounds.conf('{"a": "' + "x" * 100 + '"}', 50)


def test_a_manual_run_with_a_checked_conf_reaches_the_db(api: Api) -> None:
    conf = '{"nested": {"list": [1, 2.5, "é", null, true]}, "big": 9223372036854775807}'
    _, err = api.call(
        api.dags.TriggerDag, dag_pb2.TriggerDagRequest(dag_id="d", conf_json=conf, run_id="r:1")
    )
    assert err is None, err
    created = api.proposer.proposed[-1]
    assert isinstance(created, c.CreateRuns)
    assert created.runs[0].run_type == RunType.MANUAL
    check_bounded(created)
    api.materialize()


# -- the CLI against these servicers -------------------------------------------------------------


def test_the_cli_shows_a_refusal_as_one_line(
    api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from concurrent import futures

    from raftsched.api.gen import dag_pb2_grpc
    from raftsched.api.servicers.decoding import DecodeErrorInterceptor
    from raftsched.cli.main import main

    for var in ("RAFTSCHED_SERVER", "RAFTSCHED_TOKEN", "RAFTSCHED_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4), interceptors=[DecodeErrorInterceptor()]
    )
    dag_pb2_grpc.add_DagServiceServicer_to_server(api.dags, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        argv = ["--server", f"127.0.0.1:{port}", "--timeout", "5"]
        capsys.readouterr()
        assert main(["dags", "trigger", "d", "--run-id", "r" * 10_000, *argv]) == 1
        err = capsys.readouterr().err
        assert err == (
            "raftsched: error: run_id is 10000 characters long;"
            f" the limit is {limits.MAX_ID_CHARS}\n"
        )
        when = "1800-01-01T00:00:00+00:00"
        with pytest.raises(SystemExit) as usage:  # refused by the CLI itself: a usage error
            main(["dags", "trigger", "d", "--logical-date", when, *argv])
        assert usage.value.code == 2
        assert "out of range" in capsys.readouterr().err.splitlines()[-1]
        with pytest.raises(SystemExit) as usage:
            main(["dags", "trigger", "d", "--conf", "[" * 60_000 + "]" * 60_000, *argv])
        assert usage.value.code == 2
        last = capsys.readouterr().err.splitlines()[-1]
        assert last.endswith(
            f"argument --conf: conf is nested deeper than {limits.MAX_CONF_DEPTH} levels"
        )
        assert main(["dags", "trigger", "d", "--run-id", "cli-ok", *argv]) == 0
    finally:
        server.stop(grace=0)
    assert [c.runs[0].run_id for c in api.proposer.proposed] == ["cli-ok"]
