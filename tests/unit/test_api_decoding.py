"""A request gRPC cannot decode (a string field holding bytes that are not UTF-8, or bytes that
are no message at all) is INVALID_ARGUMENT with DecodeErrorInterceptor, not INTERNAL."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from raftsched.api.gen import dag_pb2, dag_pb2_grpc
from raftsched.api.servicers.decoding import DecodeErrorInterceptor


class Echo(dag_pb2_grpc.DagServiceServicer):
    def GetDag(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.NOT_FOUND, f"DAG {request.dag_id!r} not found")

    def GetTaskLog(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        yield from ()


@pytest.fixture
def channel() -> Iterator[grpc.Channel]:
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2), interceptors=[DecodeErrorInterceptor()]
    )
    dag_pb2_grpc.add_DagServiceServicer_to_server(Echo(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as chan:
            yield chan
    finally:
        server.stop(grace=0)


def raw(channel: grpc.Channel, method: str, *, stream: bool = False) -> Any:
    kind = channel.unary_stream if stream else channel.unary_unary
    return kind(
        f"/raftsched.v1.DagService/{method}",
        request_serializer=lambda data: data,
        response_deserializer=lambda data: data,
    )


NOT_UTF8 = b"\x0a\x03a\xffb"  # field 1 (dag_id), 3 bytes, \xff is not UTF-8
SURROGATE = b"\x0a\x05\xed\xa0\x80ab"  # a UTF-8-encoded lone surrogate
CORRUPT = b"\xff\xff\xff"


@pytest.mark.parametrize("data", [NOT_UTF8, SURROGATE, CORRUPT])
def test_undecodable_requests_are_invalid_argument(channel: grpc.Channel, data: bytes) -> None:
    with pytest.raises(grpc.RpcError) as unary:
        raw(channel, "GetDag")(data, timeout=5)
    assert unary.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "raftsched.v1.GetDagRequest" in unary.value.details()
    with pytest.raises(grpc.RpcError) as streamed:
        list(raw(channel, "GetTaskLog", stream=True)(data, timeout=5))
    assert streamed.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_valid_requests_reach_the_servicer(channel: grpc.Channel) -> None:
    data = dag_pb2.GetDagRequest(dag_id="etl").SerializeToString()
    with pytest.raises(grpc.RpcError) as unary:
        raw(channel, "GetDag")(data, timeout=5)
    assert unary.value.code() == grpc.StatusCode.NOT_FOUND
    assert unary.value.details() == "DAG 'etl' not found"
    log = dag_pb2.GetTaskLogRequest(dag_id="d", run_id="r", task_id="t").SerializeToString()
    assert list(raw(channel, "GetTaskLog", stream=True)(log, timeout=5)) == []
