"""LogBuffer: chunk sizes, order, the drop-oldest bound and its marker; LogShipper's refusal."""

from __future__ import annotations

import threading

from raftsched.core.model import TaskKey
from raftsched.worker.logs import LogBuffer, LogShipper

KEY = TaskKey("d", "r", "t")


def test_adjacent_text_of_one_stream_is_joined_and_streams_keep_their_order() -> None:
    buffer = LogBuffer(max_bytes=1024, chunk_bytes=16)
    for stream, text in [
        ("stdout", "a\n"),
        ("stdout", "b\n"),
        ("stderr", "x\n"),
        ("stdout", "c\n"),
    ]:
        buffer.write(stream, text)
    assert buffer.take() == [("stdout", "a\nb\n"), ("stderr", "x\n"), ("stdout", "c\n")]
    assert buffer.take() == []


def test_chunks_never_exceed_chunk_bytes_even_with_multibyte_text() -> None:
    buffer = LogBuffer(max_bytes=4096, chunk_bytes=10)
    text = "é" * 7 + "abc" + "€" * 5  # 2-, 1- and 3-byte characters
    buffer.write("stdout", text)
    chunks = buffer.take(max_chunks=100)
    assert all(len(t.encode()) <= 10 for _, t in chunks)
    assert "".join(t for _, t in chunks) == text


def test_take_returns_at_most_max_chunks_and_keeps_the_rest() -> None:
    buffer = LogBuffer(max_bytes=1024, chunk_bytes=4)
    buffer.write("stdout", "0123456789ab")
    assert buffer.take(max_chunks=2) == [("stdout", "0123"), ("stdout", "4567")]
    assert buffer.take(max_chunks=2) == [("stdout", "89ab")]


def test_overflow_drops_the_oldest_and_marks_it() -> None:
    buffer = LogBuffer(max_bytes=20, chunk_bytes=20)
    for i in range(10):
        buffer.write("stdout", f"line {i}\n")  # 7 bytes each
    assert buffer.peak_bytes <= 20
    chunks = buffer.take(max_chunks=10)
    shipped = "".join(t for _, t in chunks)
    assert shipped.startswith("[50 bytes dropped]\n")
    assert shipped.endswith("\nine 7\nline 8\nline 9\n")  # 20 bytes kept: cut mid-line
    assert buffer.dropped_total == 50
    buffer.write("stdout", "next\n")
    assert buffer.take() == [("stdout", "next\n")]  # one marker per drop


def test_a_single_huge_write_keeps_only_its_tail() -> None:
    buffer = LogBuffer(max_bytes=16, chunk_bytes=16)
    buffer.write("stderr", "x" * 100 + "0123456789")
    assert buffer.peak_bytes <= 16
    assert "".join(t for _, t in buffer.take()) == "[94 bytes dropped]\n" + "x" * 6 + "0123456789"


def test_put_back_restores_the_front_within_the_bound() -> None:
    buffer = LogBuffer(max_bytes=16, chunk_bytes=8)
    buffer.write("stdout", "abcdefgh")
    taken = buffer.take()
    buffer.write("stdout", "12345678")
    buffer.put_back(taken)
    assert "".join(t for _, t in buffer.take()) == "abcdefgh12345678"


def test_a_full_chunk_sets_ready() -> None:
    buffer = LogBuffer(max_bytes=64, chunk_bytes=8)
    buffer.write("stdout", "1234")
    assert not buffer.ready.is_set()
    buffer.write("stdout", "5678")
    assert buffer.ready.is_set()
    buffer.take()
    assert not buffer.ready.is_set()


class RefusingTransport:
    def __init__(self) -> None:
        self.calls = 0

    def append_logs(self, key: TaskKey, token: int, chunks: object) -> bool:
        self.calls += 1
        return False


def test_a_refused_append_stops_shipping_and_calls_on_refused() -> None:
    refused = threading.Event()
    buffer = LogBuffer(max_bytes=1024, chunk_bytes=8)
    transport = RefusingTransport()
    shipper = LogShipper(transport, KEY, 1, buffer, flush_interval=0.01, on_refused=refused.set)  # type: ignore[arg-type]
    shipper.start()
    buffer.write("stdout", "hello world\n")
    assert refused.wait(10)
    shipper.close(timeout=5)
    assert shipper.refused and transport.calls == 1


class RecordingTransport:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def append_logs(self, key: TaskKey, token: int, chunks: list[tuple[str, str]]) -> bool:
        self.sent.extend(chunks)
        return True


def test_an_attempt_that_prints_nothing_starts_no_shipper_thread() -> None:
    before = threading.active_count()
    transport = RecordingTransport()
    shipper = LogShipper(transport, KEY, 1, LogBuffer(), flush_interval=0.01).start()  # type: ignore[arg-type]
    assert threading.active_count() == before
    shipper.close(timeout=1.0)
    assert not shipper._started and transport.sent == []


def test_the_shipper_thread_starts_with_the_first_output_and_ships_it_all() -> None:
    transport = RecordingTransport()
    buffer = LogBuffer()
    shipper = LogShipper(transport, KEY, 1, buffer, flush_interval=0.01).start()  # type: ignore[arg-type]
    assert not shipper._started
    buffer.write("stdout", "hello\n")
    assert shipper._started
    buffer.write("stderr", "done\n")
    shipper.close(timeout=5.0)
    assert "".join(text for _, text in transport.sent) == "hello\ndone\n"


def test_output_written_before_start_is_shipped() -> None:
    transport = RecordingTransport()
    buffer = LogBuffer()
    buffer.write("stdout", "early\n")
    shipper = LogShipper(transport, KEY, 1, buffer, flush_interval=0.01).start()  # type: ignore[arg-type]
    assert shipper._started
    shipper.close(timeout=5.0)
    assert transport.sent == [("stdout", "early\n")]
