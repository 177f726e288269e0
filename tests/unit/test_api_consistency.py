"""Read-your-writes and monotonic reads on the wire: the consistency interceptor around a
fake replica (a Gate whose applied index the test moves) and RaftschedClient's index
tracking, against real gRPC servers on loopback."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from datetime import UTC, datetime

import grpc
import pytest

from raftsched.api import consistency
from raftsched.api.client import (
    MAX_SEEN_FILES,
    SEEN_INDEX_ENV,
    RaftschedClient,
    SeenIndex,
    seen_index_path,
)
from raftsched.api.gen import cluster_pb2, cluster_pb2_grpc, common_pb2
from raftsched.api.server import build_server
from raftsched.api.servicers import context as ctx_module
from raftsched.api.servicers.context import ApiContext
from raftsched.config import default_config
from raftsched.core import results as r
from raftsched.errors import ApiError, CommitTimeout, NoQuorumError, StatusError
from tests.integration import node_hooks

GET_STATUS = cluster_pb2.GetStatusRequest()


class FakeGate:
    """A replica at ``applied``; ``await_applied`` waits up to ``wait`` s for it."""

    def __init__(self, name: str, applied: int, *, wait: float = 0.2, log_end: int = 10**9):
        self.name, self.applied, self.wait, self.log_end = name, applied, wait, log_end
        self.read_indexes = 0
        self.lock = threading.Lock()

    def applied_through(self) -> int:
        return self.applied

    def await_applied(self, min_index: int, context: grpc.ServicerContext) -> bool:
        end = time.monotonic() + self.wait
        while self.applied < min_index:
            if self.log_end < min_index:
                return True
            if time.monotonic() >= end:
                raise StatusError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"node {self.name} has applied up to {self.applied}, you have seen"
                    f" {min_index}; retry (the client moves to another node)",
                )
            time.sleep(0.01)
        return False

    def read_index(self, context: grpc.ServicerContext) -> None:
        with self.lock:
            self.read_indexes += 1


class Status(cluster_pb2_grpc.ClusterServiceServicer):
    """GetStatus answers its node's name and the gate's applied index as freshness."""

    def __init__(self, gate: FakeGate) -> None:
        self.gate = gate
        self.seen_headers: list[dict[str, str]] = []

    def GetStatus(self, request, context):
        self.seen_headers.append(dict(context.invocation_metadata()))
        return cluster_pb2.GetStatusResponse(
            nodes=[cluster_pb2.NodeStatus(node_id=self.gate.name)],
            freshness=common_pb2.Freshness(node_id=self.gate.name, applied_index=self.gate.applied),
        )


@contextmanager
def cluster(tmp_path, *gates: FakeGate, **options) -> Iterator[tuple[RaftschedClient, list]]:
    api = replace(default_config(tmp_path).api, grpc_bind="127.0.0.1:0")
    with ExitStack() as stack:
        servicers = [Status(gate) for gate in gates]
        servers = []
        for gate, servicer in zip(gates, servicers, strict=True):
            server = build_server(api, [servicer], max_workers=4, gate=gate)
            server.start()
            stack.callback(server.stop, None)
            servers.append(server)
        options.setdefault("deadline", 5.0)
        client = RaftschedClient([s.address for s in servers], **options)
        stack.callback(client.close)
        yield client, servicers


def answered_by(response) -> str:
    return response.nodes[0].node_id


def test_the_client_sends_what_it_has_seen_and_a_lagging_node_hands_over(tmp_path):
    fresh, lagging = FakeGate("fresh", 10), FakeGate("lagging", 4)
    with cluster(tmp_path, fresh, lagging) as (client, servicers):
        assert answered_by(client.cluster.GetStatus(GET_STATUS)) == "fresh"
        assert client.seen.value == 10
        client._mark_good(1)  # the next call starts at the lagging node
        assert answered_by(client.cluster.GetStatus(GET_STATUS)) == "fresh"
    assert servicers[1].seen_headers == []  # refused before its handler ran
    assert servicers[0].seen_headers[-1][consistency.MIN_INDEX_HEADER] == "10"


def test_a_lagging_node_that_catches_up_within_the_wait_answers(tmp_path):
    lagging = FakeGate("lagging", 4, wait=2.0)
    seen = SeenIndex(8)
    with cluster(tmp_path, lagging) as (client, _):
        threading.Timer(0.2, lambda: setattr(lagging, "applied", 9)).start()
        response = client.cluster.GetStatus(GET_STATUS, seen=seen)
    assert response.freshness.applied_index == 9
    assert seen.value == 9 and client.seen.value == 9


def test_every_node_behind_is_unavailable_naming_both_indexes(tmp_path):
    with (
        cluster(tmp_path, FakeGate("a", 3), deadline=1.0) as (client, _),
        pytest.raises(NoQuorumError) as err,
    ):
        client.cluster.GetStatus(GET_STATUS, seen=SeenIndex(50))
    assert "has applied up to 3, you have seen 50" in str(err.value)


def test_without_tracking_the_client_sends_nothing_and_reads_from_behind(tmp_path):
    fresh, lagging = FakeGate("fresh", 10), FakeGate("lagging", 4)
    with cluster(tmp_path, fresh, lagging, track_index=False) as (client, servicers):
        client.cluster.GetStatus(GET_STATUS)
        client._mark_good(1)
        assert answered_by(client.cluster.GetStatus(GET_STATUS)) == "lagging"
    assert consistency.MIN_INDEX_HEADER not in servicers[1].seen_headers[0]


def test_a_linearizable_read_asks_for_a_read_index(tmp_path):
    gate = FakeGate("a", 5)
    with cluster(tmp_path, gate) as (client, servicers):
        client.cluster.GetStatus(GET_STATUS)
        client.cluster.GetStatus(GET_STATUS, consistency="linearizable")
    assert gate.read_indexes == 1
    assert servicers[0].seen_headers[-1][consistency.CONSISTENCY_HEADER] == "linearizable"


def test_the_clients_default_consistency_applies_to_reads(tmp_path):
    gate = FakeGate("a", 5)
    with cluster(tmp_path, gate, consistency="linearizable") as (client, _):
        client.cluster.GetStatus(GET_STATUS)
    assert gate.read_indexes == 1
    with pytest.raises(ValueError, match="consistency"):
        RaftschedClient(["127.0.0.1:1"], consistency="strong")


def test_a_malformed_min_index_is_invalid_argument(tmp_path):
    with cluster(tmp_path, FakeGate("a", 5)) as (client, _), pytest.raises(ApiError) as err:
        client.cluster.GetStatus(GET_STATUS, metadata=[(consistency.MIN_INDEX_HEADER, "x")])
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert consistency.MIN_INDEX_HEADER in err.value.message


def test_a_recreated_cluster_resets_what_the_client_has_seen(tmp_path):
    gate = FakeGate("new", 3, log_end=3)
    seen = SeenIndex(900)
    with cluster(tmp_path, gate) as (client, _):
        client.cluster.GetStatus(GET_STATUS, seen=seen)
    assert seen.value == 3


def test_seen_index_survives_in_a_file(tmp_path):
    path = tmp_path / "state" / "seen-index"
    assert SeenIndex.load(path).value == 0
    seen = SeenIndex(5)
    seen.observe(3)
    seen.observe(12)
    seen.save(path)
    assert SeenIndex.load(path).value == 12
    path.write_text("garbage")
    assert SeenIndex.load(path).value == 0


def test_apply_delay_hook_holds_back_the_commit_index_a_follower_learns():
    delivered = []

    def deliver(peer, msg):
        delivered.append(msg)

    class Raft:
        receive = staticmethod(deliver)

        def filter_received(self, wrap):
            inner = self.receive
            self.receive = lambda peer, message: wrap(peer, message, inner)

    class Node:
        raft = Raft()

    node = Node()
    node_hooks.install(node, {})  # type: ignore[arg-type]
    node_hooks.install(node, {node_hooks.APPLY_DELAY_ENV: "nope"})  # type: ignore[arg-type]
    assert len(delivered) == 0
    node.raft.receive(None, {"type": "append_entries", "commit_index": 3})
    assert delivered[-1]["commit_index"] == 3  # not installed: untouched
    node_hooks.install(node, {node_hooks.APPLY_DELAY_ENV: "0.2"})  # type: ignore[arg-type]
    receive = node.raft.receive
    receive(None, {"type": "append_entries", "commit_index": 5})
    assert delivered[-1]["commit_index"] == 0  # heard just now: held back
    receive(None, {"type": "request_vote", "term": 2})
    assert delivered[-1] == {"type": "request_vote", "term": 2}
    time.sleep(0.25)
    receive(None, {"type": "append_entries", "commit_index": 9})
    assert delivered[-1]["commit_index"] == 5  # what was heard 0.2 s ago


def test_apply_delay_releases_in_order_with_a_clock():
    now = [0.0]
    delay = node_hooks.ApplyDelay(1.0, clock=lambda: now[0])
    assert [delay.hold_back(i) for i in (1, 2)] == [0, 0]
    now[0] = 1.5
    assert delay.hold_back(7) == 2
    now[0] = 2.6
    assert delay.hold_back(8) == 7


def test_parse_reads_both_headers_and_refuses_garbage():
    wanted = consistency.parse([("x-raftsched-min-index", "42"), ("x-other", "1")])
    assert wanted == consistency.Wanted(42, False)
    assert consistency.parse([(consistency.CONSISTENCY_HEADER, "Linearizable")]).linearizable
    with pytest.raises(ValueError, match="expected 'linearizable'"):
        consistency.parse([(consistency.CONSISTENCY_HEADER, "strict")])


def test_the_cli_keeps_one_seen_index_file_per_cluster(tmp_path):
    env = {"XDG_STATE_HOME": str(tmp_path)}
    one = seen_index_path(["b:1", "a:1"], env)
    assert one == seen_index_path(["a:1", "b:1"], env)
    assert one is not None and one.parent == tmp_path / "raftsched"
    assert one != seen_index_path(["c:1"], env)
    assert seen_index_path(["a:1"], {SEEN_INDEX_ENV: ""}) is None
    assert seen_index_path(["a:1"], {SEEN_INDEX_ENV: str(tmp_path / "f")}) == tmp_path / "f"
    for n in range(MAX_SEEN_FILES + 5):
        path = seen_index_path([f"h{n}:1"], env)
        assert path is not None
        SeenIndex(n).save(path)
    assert len(list((tmp_path / "raftsched").iterdir())) == MAX_SEEN_FILES


class Replica:
    """Just enough of a SchedulerNode and a Proposer for ApiContext's consistency methods."""

    def __init__(self, applied: int, *, leader: bool = True, commits_to: int | None = None):
        self.state = types.SimpleNamespace(applied_index=applied)
        self.settings = types.SimpleNamespace(self_address="127.0.0.1:7101")
        self.leader_address = "127.0.0.1:7102" if leader else None
        self.quorum = leader
        self.commits_to = commits_to  # what a read-index commit brings it to; None: it fails
        self.deadline = 5.0
        self.proposed: list[float] = []

    def read(self, fn):
        return fn(self.state)

    def make(self, cls, **fields):
        return cls(now=datetime.now(UTC), **fields)

    def propose(self, command, deadline):
        self.proposed.append(deadline)
        if self.commits_to is None:
            raise CommitTimeout(command.request_id, deadline)
        self.state.applied_index = self.commits_to
        return r.Result(True)


def context_of(replica: Replica) -> ApiContext:
    return ApiContext(node=replica, proposer=replica, api=default_config().api)  # type: ignore[arg-type]


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(ctx_module, "CATCH_UP_WAIT", 0.3)
    monkeypatch.setattr(ctx_module, "READ_INDEX_WAIT", 0.2)


def test_a_node_that_catches_up_while_waiting_serves(quick):
    replica = Replica(5)
    threading.Timer(0.05, lambda: setattr(replica.state, "applied_index", 8)).start()
    assert context_of(replica).await_applied(8) is False
    assert replica.proposed == []  # no read index needed


def test_a_read_index_makes_a_lagging_node_catch_up(quick):
    replica = Replica(5, commits_to=12)
    assert context_of(replica).await_applied(8) is False
    assert len(replica.proposed) == 1 and replica.proposed[0] <= 0.25


def test_an_index_this_cluster_never_committed_is_a_reset(quick):
    replica = Replica(5, commits_to=6)
    assert context_of(replica).await_applied(900) is True


def test_a_node_cut_off_answers_unavailable_never_from_behind(quick):
    for replica in (Replica(5, commits_to=None), Replica(5, leader=False, commits_to=999)):
        with pytest.raises(StatusError) as err:
            context_of(replica).await_applied(900)
        assert err.value.code is grpc.StatusCode.UNAVAILABLE
        assert "has applied up to 5, you have seen 900; retry" in err.value.message
    assert replica.proposed == []  # no leader known: not even tried
