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

The workers page also shows who is gone and why, for :data:`LOST_SECONDS`: a worker that
signs off (``SignOff``: the worker when it stops, its task supervisor once it proved the
worker dead) is lost at once with the reason it gave; one that falls silent is lost with
:data:`SILENT`. A node publishes those next to the live ones (``extra["workers_lost"]``), and
:func:`roster` merges every node's: a sighting after the loss (a worker restarted under the
same id, or one that went on calling another node) makes it live again.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

LIVE_SECONDS = 30.0
LOST_SECONDS = 600.0  # lost workers are shown this long
MAX_WORKERS = 500  # workers one node remembers (the least recently seen go first)
EXTRA_KEY = "workers"  # the key of node_heartbeat.extra that holds them
LOST_KEY = "workers_lost"  # ... and the lost ones
SILENT = (
    f"no call for {LIVE_SECONDS:.0f} s (stopped without signing off, cut off, frozen, or its"
    " host is gone)"
)
INFO_FIELDS = ("host", "pid", "version", "slots")  # what a worker says about itself
Info = Mapping[str, Any]


class WorkersSeen:
    """This node's sightings of workers. Thread-safe (gRPC threads write, the heartbeat
    thread reads)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, tuple[tuple[str, ...], float, dict[str, Any]]]
        self._seen = OrderedDict()
        self._lost: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def seen(self, worker_id: str, queues: Iterable[str], info: Info | None = None) -> None:
        """``worker_id`` called now, serving ``queues``, saying ``info`` (all bounded by the
        caller; an empty ``info`` keeps what it said before)."""
        with self._lock:
            known = self._seen.get(worker_id)
            said = dict(info) if info else (known[2] if known is not None else {})
            self._seen[worker_id] = (tuple(sorted(set(queues))), self._clock(), said)
            self._seen.move_to_end(worker_id)
            self._lost.pop(worker_id, None)
            while len(self._seen) > MAX_WORKERS:
                self._seen.popitem(last=False)

    def gone(self, worker_id: str, reason: str, info: Info | None = None) -> None:
        """``worker_id`` signed off now, for ``reason`` (bounded by the caller)."""
        now = self._clock()
        with self._lock:
            queues, at, said = self._seen.pop(worker_id, ((), None, {}))  # None: not seen here
            self._put_lost(worker_id, dict(info or said), queues, at, now, reason, silent=False)

    def _put_lost(
        self,
        worker_id: str,
        info: dict[str, Any],
        queues: Iterable[str],
        seen: float | None,
        at: float,
        reason: str,
        *,
        silent: bool,
    ) -> None:
        record = {**info, "queues": list(queues), "seen": seen, "at": at}
        self._lost[worker_id] = {**record, "reason": reason, "silent": silent}
        self._lost.move_to_end(worker_id)
        while len(self._lost) > MAX_WORKERS:
            self._lost.popitem(last=False)

    def published(self) -> dict[str, dict[str, Any]]:
        """The live ones as JSON-able data for the heartbeat row: {worker_id: {"queues":
        [...], "seen": epoch seconds, host, pid, version, slots}}; those past LIVE_SECONDS
        become lost (:data:`SILENT`)."""
        now = self._clock()
        with self._lock:
            for worker_id in [w for w, (_, at, _) in self._seen.items() if now - at > LIVE_SECONDS]:
                queues, at, said = self._seen.pop(worker_id)
                self._put_lost(worker_id, said, queues, at, now, SILENT, silent=True)
            live = self._seen.items()
            return {w: {**said, "queues": list(q), "seen": at} for w, (q, at, said) in live}

    def lost(self) -> dict[str, dict[str, Any]]:
        """The lost ones of the last LOST_SECONDS, JSON-able: {worker_id: {"reason", "at"
        (when found gone), "seen" (its last call here), "silent", "queues", host, ...}}."""
        self.published()  # the silent ones first
        now = self._clock()
        with self._lock:
            for worker_id in [w for w, x in self._lost.items() if now - x["at"] > LOST_SECONDS]:
                del self._lost[worker_id]
            return {w: dict(x) for w, x in self._lost.items()}


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


def roster(
    published: Iterable[Any], lost: Iterable[Any], now: float
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(live, lost) workers from several nodes' ``published()`` and ``lost()`` data (read back
    from the DB: anything malformed is skipped). Each live worker is its latest sighting; a
    lost one its latest loss, unless a sighting came after it (for a silent loss: after its
    last call, for a sign-off: after the sign-off)."""
    seen: dict[str, dict[str, Any]] = {}
    for workers in published:
        for worker_id, data in _records(workers, "seen"):
            if now - data["seen"] <= LIVE_SECONDS and data["seen"] > _at(seen, worker_id, "seen"):
                seen[worker_id] = data
    gone: dict[str, dict[str, Any]] = {}
    for workers in lost:
        for worker_id, data in _records(workers, "at"):
            if now - data["at"] <= LOST_SECONDS and data["at"] > _at(gone, worker_id, "at"):
                gone[worker_id] = data
    for worker_id, data in list(gone.items()):
        back_after = data.get("seen") if data.get("silent") else data["at"]
        if not isinstance(back_after, int | float):
            back_after = data["at"]
        last = _at(seen, worker_id, "seen")
        if last > back_after:
            del gone[worker_id]
        elif worker_id in seen:  # its last call, whichever node took it
            mine = data.get("seen")
            data["seen"] = max(last, mine) if isinstance(mine, int | float) else last
            del seen[worker_id]
    return dict(sorted(seen.items())), dict(sorted(gone.items(), key=lambda x: -x[1]["at"]))


def _records(workers: Any, when: str) -> Iterable[tuple[str, dict[str, Any]]]:
    if not isinstance(workers, Mapping):
        return
    for worker_id, data in workers.items():
        if isinstance(data, Mapping) and isinstance(data.get(when), int | float):
            queues = data.get("queues")
            yield str(worker_id), {**data, "queues": queues if isinstance(queues, list) else []}


def _at(records: Mapping[str, Mapping[str, Any]], worker_id: str, when: str) -> float:
    found = records.get(worker_id)
    return float(found[when]) if found is not None else float("-inf")


def served_queues(workers: Mapping[str, Iterable[str]]) -> frozenset[str]:
    return frozenset(q for queues in workers.values() for q in queues)


def waiting_note(queue: str, served: frozenset[str] | None) -> str:
    """Why a QUEUED task of ``queue`` may wait: "" when a live worker serves it or nobody
    can tell (``served`` None)."""
    if served is None or queue in served:
        return ""
    return f"no live worker serves queue {queue!r}"
