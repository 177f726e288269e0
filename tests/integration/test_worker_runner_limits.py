"""Issue #9 through the real runner: a task printing NUL and invalid UTF-8, and one printing a
1 MB line, reach the cluster as clean text in chunks within ``raftsched.core.limits``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from raftsched.core import limits
from raftsched.core.model import TaskKey
from raftsched.worker.logs import LogBuffer, LogShipper
from raftsched.worker.runner import Attempt
from raftsched.worker.transport import Assignment

KEY = TaskKey("etl", "manual__1", "print")


class Recording:
    """A transport that keeps every append_logs call as it was sent."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, str]]] = []
        self.lock = threading.Lock()

    def append_logs(self, key: TaskKey, token: int, chunks: Any) -> bool:
        with self.lock:
            self.calls.append(list(chunks))
        return True


def run_shipped(command: str) -> tuple[Any, list[list[tuple[str, str]]]]:
    assignment = Assignment(key=KEY, token=3, try_number=1, kind="bash", command=command)
    transport = Recording()
    buffer = LogBuffer()
    shipper = LogShipper(transport, KEY, 3, buffer, flush_interval=0.05).start()  # type: ignore[arg-type]
    outcome = Attempt(assignment, buffer.write).run()
    shipper.close(timeout=30)
    for call in transport.calls:
        assert 0 < len(call) <= limits.MAX_LOG_CHUNKS_PER_CALL
        for stream, text in call:
            assert stream in ("stdout", "stderr")
            assert len(text) <= limits.MAX_LOG_CHUNK_CHARS
            assert limits.is_clean(text), text[:80]
    return outcome, transport.calls


def text_of(calls: list[list[tuple[str, str]]], stream: str) -> str:
    return "".join(text for call in calls for s, text in call if s == stream)


@pytest.mark.timeout(60)
def test_nul_and_invalid_utf8_become_replacement_characters() -> None:
    outcome, calls = run_shipped(r"printf 'a\000b\377c'; printf 'x\000y\n' >&2; exit 3")
    assert text_of(calls, "stdout") == "a\ufffdb\ufffdc"
    assert text_of(calls, "stderr") == "x\ufffdy\n"
    assert not outcome.success and outcome.exit_code == 3
    assert outcome.message == "x\ufffdy"  # the failure message is clean too


@pytest.mark.timeout(60)
def test_a_one_megabyte_line_is_shipped_whole_in_bounded_chunks() -> None:
    outcome, calls = run_shipped("head -c 1000000 /dev/zero | tr '\\0' x; echo; echo done")
    assert outcome.success
    shipped = text_of(calls, "stdout")
    assert shipped == "x" * 1_000_000 + "\ndone\n"
    assert sum(len(call) for call in calls) >= 1_000_000 // limits.MAX_LOG_CHUNK_CHARS
