"""The node's gRPC server runs long polls on a pool of their own (api/server.py): a short call
finds a thread while every long-poll thread waits. A real server on loopback, one thread in
each pool, a servicer whose Lease blocks until released."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from raftsched.api import auth
from raftsched.api.gen import worker_pb2, worker_pb2_grpc
from raftsched.api.server import LONG_POLLS, build_server
from raftsched.config import default_config

WAIT = 30.0  # bound of every wait below; a passing run waits far less


class BlockingWorkers(worker_pb2_grpc.WorkerServiceServicer):
    """Lease holds its thread until ``release`` is set; Heartbeat answers at once. Each
    records the name of the thread it ran on."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.leasing = threading.Event()
        self.threads: dict[str, str] = {}

    def Lease(self, request: Any, context: Any) -> Any:
        self.threads["Lease"] = threading.current_thread().name
        self.leasing.set()
        self.release.wait(WAIT)
        return worker_pb2.LeaseResponse()

    def Heartbeat(self, request: Any, context: Any) -> Any:
        self.threads["Heartbeat"] = threading.current_thread().name
        return worker_pb2.HeartbeatResponse()


@pytest.fixture
def served() -> Iterator[tuple[BlockingWorkers, worker_pb2_grpc.WorkerServiceStub]]:
    servicer = BlockingWorkers()
    api = dataclasses.replace(default_config().api, grpc_max_workers=1, grpc_max_long_polls=1)
    server = build_server(api, [servicer], bind="127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(server.address)
    try:
        yield servicer, worker_pb2_grpc.WorkerServiceStub(channel)
    finally:
        servicer.release.set()
        channel.close()
        server.stop(grace=0)


def test_a_heartbeat_is_answered_while_the_long_poll_threads_wait(served) -> None:
    servicer, stub = served
    poll = stub.Lease.future(worker_pb2.LeaseRequest(worker_id="w"), timeout=WAIT)
    assert servicer.leasing.wait(WAIT)
    # the one short-call thread is free: a heartbeat does not wait for the poll
    stub.Heartbeat(worker_pb2.HeartbeatRequest(worker_id="w"), timeout=WAIT)
    assert not poll.done()
    servicer.release.set()
    poll.result(timeout=WAIT)
    assert servicer.threads["Lease"].startswith("grpc-poll")
    assert not servicer.threads["Heartbeat"].startswith("grpc-poll")


def test_every_long_poll_is_a_raftsched_method() -> None:
    # a misspelt name would leave that poll on the short calls' pool
    assert set(auth.METHOD_ROLES) >= LONG_POLLS


def test_a_task_definition_names_its_pool_and_slots() -> None:
    from raftsched.api.servicers.convert import task_definition
    from raftsched.core.model import TaskSpec

    plain = TaskSpec(task_id="a", kind="bash", command="true")
    pooled = dataclasses.replace(plain, task_id="b", pool="etl", pool_slots=3)
    assert (task_definition(plain).pool, task_definition(plain).pool_slots) == ("default_pool", 1)
    assert (task_definition(pooled).pool, task_definition(pooled).pool_slots) == ("etl", 3)
