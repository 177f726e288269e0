"""Issue #9, the worker's side: task output and outcome messages leave the worker clean and
within the cluster's bounds (``raftsched.core.limits``), whatever the task prints."""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pytest

from raftsched.core import limits
from raftsched.core.model import TaskKey
from raftsched.errors import ApiError
from raftsched.worker.grpc_transport import GrpcWorkerTransport
from raftsched.worker.logs import (
    CHUNKS_PER_CALL,
    LogBuffer,
    LogShipper,
    clean_output,
    outcome_message,
)

KEY = TaskKey("d", "r", "t")


def drain(buffer: LogBuffer) -> list[list[tuple[str, str]]]:
    calls = []
    while batch := buffer.take():
        calls.append(batch)
    return calls


def test_nul_and_lone_surrogates_become_replacement_characters() -> None:
    buffer = LogBuffer()
    buffer.write("stdout", "a\x00b\ud800c\udcffd")
    assert buffer.take() == [("stdout", "a\ufffdb\ufffdc\ufffdd")]
    assert clean_output("plain") == "plain"


def test_a_one_megabyte_line_is_split_within_the_bounds() -> None:
    line = "x" * 1_000_000 + "\n"
    buffer = LogBuffer()
    buffer.write("stdout", line)
    calls = drain(buffer)
    assert all(len(batch) <= limits.MAX_LOG_CHUNKS_PER_CALL for batch in calls)
    chunks = [text for batch in calls for _, text in batch]
    assert all(0 < len(text) <= limits.MAX_LOG_CHUNK_CHARS for text in chunks)
    assert "".join(chunks) == line
    assert buffer.dropped_total == 0


def test_multibyte_output_stays_within_the_character_bound() -> None:
    buffer = LogBuffer()
    buffer.write("stderr", "€" * 300_000)  # 900 kB of UTF-8
    chunks = [text for batch in drain(buffer) for _, text in batch]
    assert all(len(text) <= limits.MAX_LOG_CHUNK_CHARS for text in chunks)
    assert "".join(chunks) == "€" * 300_000


def test_take_never_returns_more_chunks_than_a_call_may_carry() -> None:
    buffer = LogBuffer(max_bytes=1 << 20, chunk_bytes=8)
    buffer.write("stdout", "y" * 8 * 1000)
    assert len(buffer.take(max_chunks=10_000)) == limits.MAX_LOG_CHUNKS_PER_CALL
    assert CHUNKS_PER_CALL <= limits.MAX_LOG_CHUNKS_PER_CALL


def test_a_chunk_size_past_the_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk_bytes"):
        LogBuffer(max_bytes=1 << 22, chunk_bytes=limits.MAX_LOG_CHUNK_CHARS + 1)


def test_outcome_messages_are_cut_and_cleaned() -> None:
    message = outcome_message("start\x00" + "z" * 100_000 + "\ud800end")
    assert len(message) == limits.MAX_MESSAGE_CHARS
    assert message.startswith("\u2026") and message.endswith("z\ufffdend")
    assert limits.is_clean(message)
    assert outcome_message("exit code 2") == "exit code 2"


class ScriptedTransport:
    """append_logs fails with the given ApiErrors, then accepts."""

    def __init__(self, *errors: ApiError) -> None:
        self.errors = list(errors)
        self.sent: list[list[tuple[str, str]]] = []
        self.done = threading.Event()

    def append_logs(self, key: TaskKey, token: int, chunks: Any) -> bool:
        if self.errors:
            raise self.errors.pop(0)
        self.sent.append(list(chunks))
        self.done.set()
        return True


def test_a_full_outbox_is_retried_and_an_invalid_append_dropped() -> None:
    full = ApiError(grpc.StatusCode.RESOURCE_EXHAUSTED, "the cluster's outbox holds ...")
    buffer = LogBuffer(max_bytes=1024, chunk_bytes=64)
    transport = ScriptedTransport(full)
    shipper = LogShipper(transport, KEY, 1, buffer, flush_interval=0.01)  # type: ignore[arg-type]
    buffer.write("stdout", "kept\n")
    assert not shipper.flush()  # not taken: put back
    assert shipper.flush()
    assert transport.sent == [[("stdout", "kept\n")]]

    invalid = ApiError(grpc.StatusCode.INVALID_ARGUMENT, "chunks[0].text is too long")
    transport = ScriptedTransport(invalid)
    shipper = LogShipper(transport, KEY, 1, buffer, flush_interval=0.01)  # type: ignore[arg-type]
    buffer.write("stdout", "refused\n")
    assert shipper.flush()  # dropped, not retried forever
    buffer.write("stdout", "next\n")
    assert shipper.flush()
    assert transport.sent == [[("stdout", "next\n")]] and not shipper.refused


class RecordingClient:
    """The parts of RaftschedClient GrpcWorkerTransport uses; records each request."""

    deadline = 5.0

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []
        recorder = self

        class Workers:
            def __getattr__(self, method: str) -> Any:
                def call(request: Any, timeout: float | None = None) -> Any:
                    request.SerializeToString()  # what gRPC would do: must not raise
                    recorder.requests.append((method, request))
                    return None

                return call

        self.workers = Workers()


def test_the_grpc_transport_sends_only_clean_bounded_text() -> None:
    client = RecordingClient()
    transport = GrpcWorkerTransport(client, worker_id="w1")  # type: ignore[arg-type]
    assert transport.complete(
        KEY, 3, success=False, exit_code=1, message="bad\ud800" + "m" * 10_000
    )
    assert transport.append_logs(KEY, 3, [("stdout", "a\x00b"), ("stderr", "c\udcffd")])
    (_, complete), (_, append) = client.requests
    assert len(complete.message) == limits.MAX_MESSAGE_CHARS
    assert [chunk.text for chunk in append.chunks] == ["a\ufffdb", "c\ufffdd"]


def test_a_lease_refused_as_invalid_stops_the_worker() -> None:
    from raftsched.errors import WorkerRejected

    class Refusing(RecordingClient):
        def __init__(self) -> None:
            super().__init__()

            class Workers:
                def Lease(self, request: Any, timeout: float | None = None) -> Any:
                    raise ApiError(grpc.StatusCode.INVALID_ARGUMENT, "worker_id contains a NUL")

            self.workers = Workers()

    transport = GrpcWorkerTransport(Refusing())  # type: ignore[arg-type]
    with pytest.raises(WorkerRejected, match="worker_id contains a NUL"):
        transport.lease("bad\x00worker", 1, 0.0)
