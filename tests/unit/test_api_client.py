"""RaftschedClient against real gRPC servers on loopback: failover, retries, typed errors,
stream resumption, and the servicer-side status mapping (raftsched.api.status)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import grpc
import pytest

from raftsched.api import status
from raftsched.api.client import RaftschedClient
from raftsched.api.gen import cluster_pb2, cluster_pb2_grpc, common_pb2, dag_pb2, dag_pb2_grpc
from raftsched.api.server import ApiServer, build_server
from raftsched.config import ApiConfig, default_config
from raftsched.core import results as r
from raftsched.errors import ApiError, CommitTimeout, DagNotFound, NoQuorumError, StatusError


class StatusServicer(cluster_pb2_grpc.ClusterServiceServicer):
    """GetStatus answers this node's name; the first ``fail`` calls answer ``code``."""

    def __init__(self, name: str, fail: int = 0, code=grpc.StatusCode.UNAVAILABLE, sleep=0.0):
        self.name, self.fail, self.code, self.sleep = name, fail, code, sleep
        self.calls = 0
        self._lock = threading.Lock()

    def GetStatus(self, request, context):
        with self._lock:
            self.calls += 1
            failing = self.calls <= self.fail
        if self.sleep:
            time.sleep(self.sleep)
        if failing:
            context.abort(self.code, f"{self.name} says {self.code.name}")
        node = cluster_pb2.NodeStatus(node_id=self.name, role=cluster_pb2.NODE_ROLE_LEADER)
        return cluster_pb2.GetStatusResponse(
            nodes=[node], freshness=common_pb2.Freshness(node_id=self.name, applied_index=7)
        )


class DagServicer(dag_pb2_grpc.DagServiceServicer):
    """PauseDag records request ids (first call UNAVAILABLE); GetDag raises what it is given;
    GetTaskLog streams a shared log, breaking after ``break_after`` chunks."""

    def __init__(self, log=(), break_after=None, error=None):
        self.request_ids: list[str] = []
        self.log, self.break_after, self.error = list(log), break_after, error

    def PauseDag(self, request, context):
        self.request_ids.append(request.request_id)
        if len(self.request_ids) == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "no leader yet")
        return dag_pb2.PauseDagResponse(changed=True)

    @status.translate_errors
    def GetDag(self, request, context):
        raise self.error

    @status.translate_errors
    def GetTaskLog(self, request, context):
        self.log_calls = getattr(self, "log_calls", 0) + 1
        for sent, chunk in enumerate(c for c in self.log if c.seq > request.after_seq):
            if self.break_after is not None and sent >= self.break_after:
                self.break_after = 0  # this node is going down: it serves nothing more
                raise StatusError(grpc.StatusCode.UNAVAILABLE, "node going down")
            yield chunk


def api_config(tmp_path, **changes) -> ApiConfig:
    return replace(default_config(tmp_path).api, grpc_bind="127.0.0.1:0", **changes)


@contextmanager
def serving(api: ApiConfig, *servicers) -> Iterator[ApiServer]:
    server = build_server(api, servicers, max_workers=8)
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=None)


def dead_address() -> str:
    """A loopback port nothing listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def client_for(tmp_path, *nodes, dead: int = 0, **options) -> Iterator[RaftschedClient]:
    """A client of ``dead`` unreachable addresses, then one server per servicer in ``nodes``."""
    with ExitStack() as stack:
        servers = [stack.enter_context(serving(api_config(tmp_path), node)) for node in nodes]
        addresses = [dead_address() for _ in range(dead)] + [s.address for s in servers]
        yield stack.enter_context(RaftschedClient(addresses, **options))


GET_STATUS = cluster_pb2.GetStatusRequest()
C = grpc.StatusCode


def test_fails_over_from_a_dead_node_and_sticks_to_the_live_one(tmp_path):
    live = StatusServicer("live")
    with client_for(tmp_path, live, dead=1, deadline=5) as client:
        first = client.cluster.GetStatus(GET_STATUS)
        second = client.cluster.GetStatus(GET_STATUS)
    assert first.nodes[0].node_id == "live" and first.freshness.applied_index == 7
    assert second.nodes[0].node_id == "live"
    assert live.calls == 2


def test_retries_unavailable_on_the_same_node_then_succeeds(tmp_path):
    flaky = StatusServicer("flaky", fail=2)
    with client_for(tmp_path, flaky, deadline=5) as client:
        answer = client.cluster.GetStatus(GET_STATUS)
    assert answer.nodes[0].node_id == "flaky"
    assert flaky.calls == 3


def test_every_node_down_is_no_quorum_naming_each_address():
    addresses = [dead_address(), dead_address()]
    with RaftschedClient(addresses, deadline=1.0) as client, pytest.raises(NoQuorumError) as err:
        client.cluster.GetStatus(GET_STATUS)
    for address in addresses:
        assert address in str(err.value)
    assert "raftsched cluster status" in str(err.value)


def test_nodes_without_quorum_are_no_quorum_with_their_message(tmp_path):
    refusing = StatusServicer("n1", fail=10**6)
    with (
        client_for(tmp_path, refusing, deadline=1.5) as client,
        pytest.raises(NoQuorumError, match="n1 says UNAVAILABLE"),
    ):
        client.cluster.GetStatus(GET_STATUS)
    assert refusing.calls >= 2  # retried until the deadline


def test_slow_no_quorum_answers_end_as_no_quorum_not_deadline_exceeded(tmp_path):
    """A node without a leader takes a moment to say so; the client must not spend the end
    of its deadline on an attempt too short for any answer (that ended DEADLINE_EXCEEDED)."""
    slow = StatusServicer("n1", fail=10**6, sleep=0.2)
    with (
        client_for(tmp_path, slow, deadline=1.2) as client,
        pytest.raises(NoQuorumError, match="n1 says UNAVAILABLE"),
    ):
        client.cluster.GetStatus(GET_STATUS)


def test_other_errors_are_api_errors_without_retry(tmp_path):
    missing = StatusServicer("n1", fail=1, code=grpc.StatusCode.NOT_FOUND)
    with (
        client_for(tmp_path, missing, deadline=5) as client,
        pytest.raises(ApiError) as err,
    ):
        client.cluster.GetStatus(GET_STATUS)
    assert err.value.code is grpc.StatusCode.NOT_FOUND
    assert err.value.address == client.servers[0] and err.value.method == "GetStatus"
    assert missing.calls == 1


def test_a_hanging_node_costs_one_attempt_timeout(tmp_path):
    slow, fast = StatusServicer("slow", sleep=2.0), StatusServicer("fast")
    with client_for(tmp_path, slow, fast, deadline=5, attempt_timeout=0.3) as client:
        answer = client.cluster.GetStatus(GET_STATUS)
    assert answer.nodes[0].node_id == "fast"


def test_writes_get_a_request_id_and_are_retried_with_the_same_one(tmp_path):
    dags = DagServicer()
    with client_for(tmp_path, dags, deadline=5) as client:
        request = dag_pb2.PauseDagRequest(dag_id="etl")
        assert client.dags.PauseDag(request).changed
    assert len(dags.request_ids) == 2
    assert dags.request_ids[0] and dags.request_ids[0] == dags.request_ids[1]
    assert request.request_id == dags.request_ids[0]


def chunk(seq: int) -> common_pb2.LogChunk:
    return common_pb2.LogChunk(seq=seq, try_number=1, stream="stdout", text=f"line {seq}\n")


def test_a_broken_log_stream_resumes_on_another_node_without_gaps_or_repeats(tmp_path):
    log = [chunk(seq) for seq in range(1, 6)]
    first, second = DagServicer(log, break_after=2), DagServicer(log)
    with client_for(tmp_path, first, second, deadline=5) as client:
        request = dag_pb2.GetTaskLogRequest(dag_id="d", run_id="r", task_id="t")
        seqs = [c.seq for c in client.dags.GetTaskLog(request)]
    assert seqs == [1, 2, 3, 4, 5]
    assert second.log_calls == 1


@pytest.mark.parametrize(
    ("error", "code", "words"),
    [
        (DagNotFound("etl"), C.NOT_FOUND, "dags list"),
        (ValueError("conf_json: expected a JSON object"), C.INVALID_ARGUMENT, "conf_json"),
        (status.invalid_argument("page_size", 5000, "<= 1000"), C.INVALID_ARGUMENT, "page_size"),
        (CommitTimeout("req-1", 5.0), C.DEADLINE_EXCEEDED, "same request id"),
        (RuntimeError("secret detail"), C.INTERNAL, "log has the traceback"),
    ],
)  # fmt: skip
def test_servicer_errors_reach_the_client_as_actionable_statuses(tmp_path, error, code, words):
    # Statuses the client retries (a commit timeout) end at the call's deadline, so that one is
    # short; the others are answered at once, and a short deadline would only turn a slow CI
    # machine's first connection into DEADLINE_EXCEEDED.
    deadline = 0.5 if code is C.DEADLINE_EXCEEDED else 10
    with (
        client_for(tmp_path, DagServicer(error=error), deadline=deadline) as client,
        pytest.raises(ApiError) as err,
    ):
        client.dags.GetDag(dag_pb2.GetDagRequest(dag_id="etl"))
    assert err.value.code is code
    assert words in err.value.message
    assert "secret detail" not in err.value.message


def test_no_quorum_raised_by_a_servicer_is_unavailable_with_counts(tmp_path):
    servicer = DagServicer(error=status.no_quorum(1, 3))
    with (
        client_for(tmp_path, servicer, deadline=0.5) as client,
        pytest.raises(NoQuorumError, match="1 of 3 nodes reachable"),
    ):
        client.dags.GetDag(dag_pb2.GetDagRequest(dag_id="etl"))


@pytest.mark.parametrize(
    ("result", "code", "words"),
    [
        (r.Result(False, r.UNKNOWN_DAG), C.NOT_FOUND, "DAG 'etl' not found"),
        (r.Result(False, r.STALE_TOKEN), C.FAILED_PRECONDITION, "token 42"),
        (r.Result(False, r.RUN_EXISTS), C.ALREADY_EXISTS, "already has a run"),
        (r.Result(False, r.INVALID, "now must be aware"), C.INVALID_ARGUMENT, "now must be aware"),
        (r.Item(False, r.UNKNOWN_RUN), C.NOT_FOUND, "run 'r1'"),
        (r.Result(False, "brand_new_reason"), C.FAILED_PRECONDITION, "brand_new_reason"),
    ],
)  # fmt: skip
def test_refused_results_map_to_codes(result, code, words):
    with pytest.raises(StatusError) as err:
        status.raise_for_result(result, dag_id="etl", run_id="r1", task_id="t", token=42)
    assert err.value.code is code
    assert words in err.value.message


def test_ok_and_unchanged_results_pass():
    status.raise_for_result(r.Result(True))
    status.raise_for_result(r.Result(False, r.UNCHANGED))


def test_client_needs_an_address_and_hides_its_token():
    with pytest.raises(ValueError, match="RAFTSCHED_SERVER"):
        RaftschedClient([])
    client = RaftschedClient("127.0.0.1:1, 127.0.0.1:2", token="s3cret")
    assert client.servers == ("127.0.0.1:1", "127.0.0.1:2")
    assert "s3cret" not in repr(client)
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.cluster.GetStatus(GET_STATUS)
