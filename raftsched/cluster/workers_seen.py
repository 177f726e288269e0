"""Which workers are live and which task queues they serve (docs/architecture.md §15).

A worker names its queues in every Lease and Heartbeat call. The node that answers notes
(worker id, queues, when) in its :class:`WorkersSeen` and publishes the live ones in its own
heartbeat row (``node_heartbeat.extra["workers"]``, written every ``scheduler_heartbeat_sec``),
so every node, reading every row, knows every live worker whichever node it talks to. Like a
node heartbeat this is an observation, not replicated state: it only decides the "waiting: no
live worker serves queue 'gpu'" note, never what is leased.

The liveness rule: a worker is live while some node saw it call within
:data:`LIVE_SECONDS`. An idle worker polls every few seconds (its long poll) and a busy one
heartbeats every ``heartbeat_interval``, so a live worker is seen far more often than that;
a stopped or cut-off one drops out LIVE_SECONDS after its last call.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

LIVE_SECONDS = 30.0
MAX_WORKERS = 500  # workers one node remembers (the least recently seen go first)
EXTRA_KEY = "workers"  # the key of node_heartbeat.extra that holds them


class WorkersSeen:
    """This node's sightings of workers. Thread-safe (gRPC threads write, the heartbeat
    thread reads)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, tuple[tuple[str, ...], float]] = OrderedDict()

    def seen(self, worker_id: str, queues: Iterable[str]) -> None:
        """``worker_id`` called now, serving ``queues`` (bounded by the caller)."""
        entry = (tuple(sorted(set(queues))), self._clock())
        with self._lock:
            self._seen[worker_id] = entry
            self._seen.move_to_end(worker_id)
            while len(self._seen) > MAX_WORKERS:
                self._seen.popitem(last=False)

    def published(self) -> dict[str, dict[str, Any]]:
        """The live ones as JSON-able data for the heartbeat row: {worker_id: {"queues":
        [...], "seen": epoch seconds}}; forgets those past LIVE_SECONDS."""
        now = self._clock()
        with self._lock:
            for worker_id in [w for w, (_, at) in self._seen.items() if now - at > LIVE_SECONDS]:
                del self._seen[worker_id]
            return {w: {"queues": list(q), "seen": at} for w, (q, at) in self._seen.items()}


def live_workers(published: Iterable[Mapping[str, Any]], now: float) -> dict[str, tuple[str, ...]]:
    """Live workers and their queues, from several nodes' ``published()`` data (read back
    from the DB: anything malformed is skipped). A worker seen by several nodes counts with
    its latest sighting."""
    latest: dict[str, tuple[float, tuple[str, ...]]] = {}
    for workers in published:
        if not isinstance(workers, Mapping):
            continue
        for worker_id, data in workers.items():
            if not isinstance(data, Mapping):
                continue
            at, queues = data.get("seen"), data.get("queues")
            if not isinstance(at, int | float) or not isinstance(queues, list):
                continue
            if now - at > LIVE_SECONDS or at <= latest.get(str(worker_id), (float("-inf"),))[0]:
                continue
            latest[str(worker_id)] = (float(at), tuple(str(q) for q in queues))
    return {worker_id: queues for worker_id, (_, queues) in sorted(latest.items())}


def served_queues(workers: Mapping[str, Iterable[str]]) -> frozenset[str]:
    return frozenset(q for queues in workers.values() for q in queues)


def waiting_note(queue: str, served: frozenset[str] | None) -> str:
    """Why a QUEUED task of ``queue`` may wait: "" when a live worker serves it or nobody
    can tell (``served`` None)."""
    if served is None or queue in served:
        return ""
    return f"no live worker serves queue {queue!r}"
