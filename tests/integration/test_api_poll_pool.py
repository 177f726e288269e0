"""Long polls never delay a heartbeat: a node's Lease and LeaseCallbacks polls wait on a thread
pool of their own (``[api] grpc_max_long_polls``), apart from the short calls
(``[api] grpc_max_workers``; ``raftsched/api/server.py``).

One real node, a real running attempt (leased over gRPC), then 100 idle workers: each holds a
``Lease`` long poll and a ``LeaseCallbacks`` long poll on the node, on a connection of its own,
as a real worker does on the first node of its list. The attempt's heartbeats must still each
be answered within the time its worker can give one without being fenced: the fence kills an
attempt ``lease_ttl - max(1 s, 20 %)`` after the send of its last accepted heartbeat, and the
next heartbeat goes out ``heartbeat_interval`` after it (docs/architecture.md §11). With one
pool of 64 threads, 200 polls took every thread and a heartbeat waited for a poll to end (up
to its 30 s).
"""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path

import grpc
import pytest
from api_harness import WORKER, ApiCluster
from harness import wait_for

from raftsched.api.gen import common_pb2, dag_pb2, worker_pb2, worker_pb2_grpc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

LEASE_TTL = 10.0  # the defaults of [worker] lease_ttl and heartbeat_interval
HEARTBEAT = 2.0
# Longest a heartbeat may take: the fence window less the gap to the next heartbeat
FENCE = LEASE_TTL - max(1.0, 0.2 * LEASE_TTL)
BOUND = FENCE - HEARTBEAT
IDLE_WORKERS = 100
POLL_WAIT = 30.0  # what a Lease may wait at most (servicers/workers.py MAX_WAIT)
HEARTBEATS = 6
AUTH = (("authorization", f"Bearer {WORKER}"),)

DAG = textwrap.dedent(
    """\
    from datetime import datetime

    from raftsched import DAG, BashTask

    with DAG("busy", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        BashTask("work", command="sleep 600")
    """
)


def _channel(address: str) -> grpc.Channel:
    # a connection of its own, as every worker process has
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def test_heartbeats_are_answered_within_the_fence_window_under_100_idle_workers(
    tmp_path: Path, sqlite_url: str
) -> None:
    config = {"api": {"grpc_max_workers": 64}}
    with ApiCluster(
        tmp_path,
        sqlite_url,
        nodes=1,
        dags={"busy.py": DAG},
        lease_ttl=LEASE_TTL,
        heartbeat_interval=HEARTBEAT,
        config=config,
    ) as cluster:
        cluster.start()
        leading = lambda: (cluster.status(0) or {}).get("role") == "leader"  # noqa: E731
        wait_for(leading, timeout=60, what="a leader")
        client = cluster.client()
        cluster.wait_dags(client, {"busy"})
        client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="busy"))
        address = cluster.api_addresses[0]
        busy = _channel(address)
        stub = worker_pb2_grpc.WorkerServiceStub(busy)

        def lease() -> worker_pb2.TaskLease | None:
            request = worker_pb2.LeaseRequest(
                worker_id="busy", max_tasks=1, wait_seconds=1, lease_ttl_seconds=LEASE_TTL
            )
            leases = stub.Lease(request, metadata=AUTH, timeout=10).leases
            return leases[0] if leases else None

        granted = wait_for(lease, timeout=30, what="the busy task leased")
        ref = worker_pb2.LeaseRef(key=granted.key, token=granted.token)

        def heartbeat(n: int) -> float:
            """Seconds one heartbeat of the running attempt took (DEADLINE_EXCEEDED past
            BOUND: the test fails)."""
            request = worker_pb2.HeartbeatRequest(
                worker_id="busy", leases=[ref], lease_ttl_seconds=LEASE_TTL, request_id=f"hb-{n}"
            )
            started = time.monotonic()
            try:
                answer = stub.Heartbeat(request, metadata=AUTH, timeout=BOUND)
            except grpc.RpcError as err:
                assert err.code() != grpc.StatusCode.DEADLINE_EXCEEDED, (
                    f"heartbeat {n} not answered within {BOUND} s, the fence window less one"
                    " heartbeat interval"
                )
                raise
            assert [s.ok for s in answer.leases] == [True], answer
            return time.monotonic() - started

        baseline = [heartbeat(n) for n in range(HEARTBEATS)]  # no poll waiting: for the log

        channels = [_channel(address) for _ in range(IDLE_WORKERS)]
        polls: list[grpc.Future] = []
        try:
            for i, channel in enumerate(channels):
                idle = worker_pb2_grpc.WorkerServiceStub(channel)
                polls.append(
                    idle.Lease.future(
                        worker_pb2.LeaseRequest(
                            worker_id=f"idle-{i}", max_tasks=1, wait_seconds=POLL_WAIT
                        ),
                        metadata=AUTH,
                        timeout=POLL_WAIT + 5,
                    )
                )
                polls.append(
                    idle.LeaseCallbacks.future(
                        worker_pb2.LeaseCallbacksRequest(
                            worker_id=f"idle-{i}", max_jobs=1, wait_seconds=POLL_WAIT
                        ),
                        metadata=AUTH,
                        timeout=POLL_WAIT + 5,
                    )
                )
            took: list[float] = []
            for n in range(HEARTBEATS, 2 * HEARTBEATS):
                took.append(heartbeat(n))
                threading.Event().wait(0.25)
            # The polls were there all along: none was answered early (nothing to lease).
            assert not any(p.done() for p in polls), "a long poll ended early"
            assert max(took) < BOUND
            before, under = [round(t, 3) for t in baseline], [round(t, 3) for t in took]
            print(f"heartbeat seconds: {before} with no poll, {under} with {len(polls)} polls")
        finally:
            for poll in polls:
                poll.cancel()
            for channel in [*channels, busy]:
                channel.close()
        ti = cluster.current(client, "busy", granted.key.run_id)["work"]
        assert ti.state == common_pb2.TASK_STATE_RUNNING
