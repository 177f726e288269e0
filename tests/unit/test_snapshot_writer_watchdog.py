"""The forked snapshot writer never stops compaction for good (raft/snapshots.py).

A child that hangs (here: on a lock a thread of the parent held when it forked, which no
thread of the child will ever release) is asked for its stack, killed and reported FAILED
with that stack; a refusal is reported FAILED once (pysyncobj's serializer serializes again
only after one); and after any failure the writer waits ``retry_after`` before the next try,
so a failure that comes at once does not fork a writer at every tick.
"""

from __future__ import annotations

import gzip
import logging
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.config import SERIALIZER_STATE

from raftsched.cluster.instruments import NodeInstruments
from raftsched.raft.snapshots import ForkedSnapshotWriter

RAFT = ((b"\x01", 7, 1), (b"\x01", 6, 1), set())  # (last applied, the one before, members)


class PlainState:
    def snapshot(self) -> dict[str, Any]:
        return {"rows": list(range(100))}


class HeldLockState:
    """Its snapshot waits for ``lock``: in a child forked while another thread held it, forever."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {}


class FailingState:
    def snapshot(self) -> dict[str, Any]:
        raise OSError(28, "No space left on device")


def outcome(writer: ForkedSnapshotWriter, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        state = writer.progress()
        if state != SERIALIZER_STATE.SERIALIZING:
            return state
        assert time.monotonic() < deadline, "the writer never finished"
        time.sleep(0.02)


def failures(instruments: NodeInstruments) -> float:
    return instruments.registry.get_sample_value("raftsched_snapshot_failures_total") or 0.0


@pytest.fixture
def instruments() -> NodeInstruments:
    return NodeInstruments()


def test_a_stuck_writer_is_killed_with_its_stack_and_the_next_one_writes(
    tmp_path: Path, instruments: NodeInstruments, caplog: pytest.LogCaptureFixture
) -> None:
    dump = tmp_path / "raft.dump"
    # 2 s: time enough for the child to register its faulthandler even on a loaded host
    writer = ForkedSnapshotWriter(str(dump), instruments, timeout=2.0, retry_after=3.0)
    lock = threading.Lock()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        assert held.wait(5)
        writer.start(HeldLockState(lock), RAFT, threading.RLock(), str(tmp_path / "tmp"))
        with caplog.at_level(logging.ERROR, logger="raftsched.raft.snapshots"):
            assert outcome(writer) == SERIALIZER_STATE.FAILED
    finally:
        writer.stop()  # a child left hanging (the test failed) is killed, not leaked
        release.set()
        holder.join(5)
    assert not writer.running and not dump.exists()
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    message = record.getMessage()
    assert "log index 7" in message and "stuck for over 2s, killed" in message
    assert "in snapshot" in message and Path(__file__).name in message, message  # its stack
    assert failures(instruments) == 1

    # it pauses before pysyncobj may try again (tested below); the next writer writes
    assert writer.progress() == SERIALIZER_STATE.SERIALIZING and not writer.running
    writer.start(PlainState(), RAFT, threading.RLock(), str(tmp_path / "tmp"))
    assert outcome(writer) == SERIALIZER_STATE.SUCCESS
    with gzip.open(dump, "rb") as src:
        payload = pickle.load(src)
    assert payload["state"] == {"rows": list(range(100))} and payload["raft"][0][1] == 7


def test_a_failed_writer_is_retried_only_after_a_while(
    tmp_path: Path, instruments: NodeInstruments, caplog: pytest.LogCaptureFixture
) -> None:
    writer = ForkedSnapshotWriter(str(tmp_path / "raft.dump"), instruments, retry_after=1.0)
    writer.start(FailingState(), RAFT, threading.RLock(), str(tmp_path / "tmp"))
    with caplog.at_level(logging.ERROR, logger="raftsched.raft.snapshots"):
        assert outcome(writer) == SERIALIZER_STATE.FAILED
    failed_at = time.monotonic()
    while writer.progress() == SERIALIZER_STATE.SERIALIZING:  # no writer forked meanwhile
        assert not writer.running
        time.sleep(0.01)
    assert time.monotonic() - failed_at >= 0.5  # 1 s, less what passed before failed_at
    assert "No space left on device" in caplog.text and "exit code 1" in caplog.text
    assert "retried in 1s" in caplog.text
    assert failures(instruments) == 1


def test_a_refusal_is_reported_failed_once_so_that_compaction_goes_on(
    tmp_path: Path, instruments: NodeInstruments, caplog: pytest.LogCaptureFixture
) -> None:
    writer = ForkedSnapshotWriter(str(tmp_path / "raft.dump"), instruments, retry_after=1.0)
    with pytest.raises(RuntimeError, match="state machine is stopped"):
        writer.refuse("no snapshot while the state machine is stopped: boom")
    with caplog.at_level(logging.WARNING, logger="raftsched.raft.snapshots"):
        assert writer.progress() == SERIALIZER_STATE.FAILED
    assert "state machine is stopped: boom" in caplog.text
    assert writer.progress() == SERIALIZER_STATE.SERIALIZING  # once, then a pause
    time.sleep(1.05)
    assert writer.progress() == SERIALIZER_STATE.NOT_SERIALIZING
    assert failures(instruments) == 1
