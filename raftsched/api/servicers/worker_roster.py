"""WorkerService's workers page calls: ``SignOff`` and ``ListWorkers``.

Which workers are live is an observation, not replicated state (docs/architecture.md §15):
``SignOff`` only notes the loss in this node's ``WorkersSeen`` (published with its heartbeat
row), and ``ListWorkers`` merges every node's rows (``LiveWorkers.roster``) with the attempts
the replicated state has leased to each worker. What a worker says about itself
(:func:`worker_info`) is bounded like everything a client sends, and only ever shown.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import grpc

from raftsched.api.gen import worker_pb2
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.live_workers import LiveWorkers
from raftsched.api.status import invalid_argument, translate_errors
from raftsched.core.model import TaskKey

if TYPE_CHECKING:
    from raftsched.api.servicers.context import ApiContext

MAX_HOST_CHARS = 255
MAX_VERSION_CHARS = 64
MAX_REASON_CHARS = 500
MAX_SLOTS = 100_000
MAX_PID = 2**31 - 1


def worker_info(message: Any, field: str = "info") -> dict[str, Any]:
    """A request's ``info`` (WorkerInfo) as {host, pid, version, slots}; {} when it has none.
    INVALID_ARGUMENT naming ``field`` when a text is too long or not clean."""
    if not message.HasField("info"):
        return {}
    info = message.info
    host = bounds.text(f"{field}.host", info.host, MAX_HOST_CHARS)
    version = bounds.text(f"{field}.version", info.version, MAX_VERSION_CHARS)
    pid = bounds.count(f"{field}.pid", info.pid, 0, MAX_PID)
    slots = bounds.count(f"{field}.slots", info.slots, 0, MAX_SLOTS)
    return {"host": host, "pid": pid, "version": version, "slots": slots}


def _info_pb(record: dict[str, Any]) -> Any:
    def text(name: str, most: int) -> str:
        value = record.get(name)
        return bounds.clean_or_empty(value, most) if isinstance(value, str) else ""

    def number(name: str, most: int) -> int:
        value = record.get(name)
        return value if isinstance(value, int) and 0 <= value <= most else 0

    return worker_pb2.WorkerInfo(
        host=text("host", MAX_HOST_CHARS),
        pid=number("pid", MAX_PID),
        version=text("version", MAX_VERSION_CHARS),
        slots=number("slots", MAX_SLOTS),
    )


def _when(value: Any) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if isinstance(value, int | float) else None


def _summary(worker_id: str, record: dict[str, Any], running: list[Any]) -> Any:
    out = worker_pb2.WorkerSummary(
        worker_id=worker_id,
        info=_info_pb(record),
        queues=[q for q in record.get("queues", ()) if isinstance(q, str)][:100],
        running=running,
    )
    seen = _when(record.get("seen"))
    if seen is not None:
        out.last_seen.CopyFrom(convert.ts(seen))
    if "reason" in record:
        lost_at = _when(record.get("at"))
        if lost_at is not None:
            out.lost_at.CopyFrom(convert.ts(lost_at))
        reason = record.get("reason")
        out.lost_reason = reason if isinstance(reason, str) else ""
    return out


def _running(state: Any) -> dict[str, list[tuple[TaskKey, int, datetime | None]]]:
    """Attempts leased now, by worker (read under the apply lock: O(running))."""
    out: dict[str, list[tuple[TaskKey, int, datetime | None]]] = defaultdict(list)
    for lease in state.task_queue.leases():
        ti = state.task_queue.running(lease.key)
        start = ti.start_date if ti is not None else None
        out[lease.worker_id].append((lease.key, lease.try_number, start))
    return out


def _attempts(found: list[tuple[TaskKey, int, datetime | None]]) -> list[Any]:
    out = []
    for key, number, start in sorted(found, key=lambda x: (x[0].dag_id, x[0].run_id, x[0].task_id)):
        attempt = worker_pb2.WorkerAttempt(key=convert.task_key(key), try_number=number)
        if start is not None:
            attempt.start_date.CopyFrom(convert.ts(start))
        out.append(attempt)
    return out


class RosterRpcs:
    """Mixed into the WorkerService servicer (which has ``ctx``)."""

    ctx: ApiContext
    _roster: LiveWorkers | None = None

    @translate_errors
    def SignOff(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker_id = bounds.ident("worker_id", request.worker_id)
        if not worker_id:
            raise invalid_argument("worker_id", worker_id, "must not be empty")
        reason = bounds.truncate(str(request.reason), MAX_REASON_CHARS) or "signed off"
        info = worker_info(request)
        if self.ctx.workers_seen is not None:
            self.ctx.workers_seen.gone(worker_id, reason, info)
        if self._roster is not None:
            self._roster = None  # the next page shows it at once
        return worker_pb2.SignOffResponse()

    @translate_errors
    def ListWorkers(self, request: Any, context: grpc.ServicerContext) -> Any:
        if self._roster is None:
            self._roster = LiveWorkers(self.ctx)
        live, lost = self._roster.roster()
        running, freshness = self.ctx.read(_running)
        response = worker_pb2.ListWorkersResponse(freshness=freshness)
        for worker_id, record in live.items():
            attempts = _attempts(running.get(worker_id, []))
            response.workers.append(_summary(worker_id, record, attempts))
        for worker_id in sorted(set(running) - set(live) - set(lost)):
            # holds leases but no sighting reached this node (its DB is down): still shown
            response.workers.append(_summary(worker_id, {}, _attempts(running[worker_id])))
        for worker_id, record in lost.items():
            response.lost.append(_summary(worker_id, record, []))
        return response
