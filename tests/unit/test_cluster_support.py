"""Helpers for in-process cluster tests (no tests here): free ports, bounded waits, a fake state."""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from raftsched.core.commands import Command
from raftsched.core.results import Result
from raftsched.raft.settings import RaftSettings

T = TypeVar("T")


def free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def wait_for(predicate: Callable[[], T], *, timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def cluster_settings(data_dir: Path, size: int = 3, **extra: Any) -> list[RaftSettings]:
    nodes = tuple(f"127.0.0.1:{port}" for port in free_ports(size))
    return [
        RaftSettings(
            self_address=node,
            nodes=nodes,
            secret="test-secret",
            data_dir=data_dir,
            commit_timeout=2.0,
            **extra,
        )
        for node in nodes
    ]


class FakeState:
    """The SchedulerState surface the node uses: apply with dedup, snapshot, digest."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, str]] = []
        self.applied_index = 0
        self.results: dict[str, Result] = {}
        self.outbox_size = 0
        self.outbox_last_seq = 0
        self.outbox_acked_seq = 0

    def apply(self, command: Command, *, log_index: int) -> Result:
        seen = self.results.get(command.request_id)
        if seen is not None:
            return replace(seen, duplicate=True)
        self.applied.append((log_index, command.request_id))
        self.applied_index = log_index
        result = Result(ok=True, value=log_index)
        self.results[command.request_id] = result
        return result

    def snapshot(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "applied": list(self.applied),
            "applied_index": self.applied_index,
        }

    def restore(self, data: dict[str, Any]) -> None:
        self.applied = [tuple(x) for x in data["applied"]]  # type: ignore[misc]
        self.applied_index = data["applied_index"]
        self.results = {rid: Result(ok=True, value=idx) for idx, rid in self.applied}

    def digest(self) -> str:
        return hashlib.sha256(repr(self.applied).encode()).hexdigest()
