"""A ListWorkers answer as plain data, for `raftsched workers list`, the workers page and the
REST API alike (each shows the same fields)."""

from __future__ import annotations

from typing import Any

from raftsched.api.wire import when


def worker_dict(worker: Any) -> dict[str, Any]:
    """One WorkerSummary: who, what it said about itself (None: it did not say), its queues,
    the attempts leased to it, its last call; for a lost one, when and why."""
    info = worker.info if worker.HasField("info") else None

    def said(name: str) -> Any:
        return (getattr(info, name) or None) if info is not None else None

    running = [
        {
            "dag_id": attempt.key.dag_id,
            "run_id": attempt.key.run_id,
            "task_id": attempt.key.task_id,
            "try_number": attempt.try_number,
            "start_date": when(attempt, "start_date"),
        }
        for attempt in worker.running
    ]
    return {
        "worker_id": worker.worker_id,
        "host": said("host"),
        "pid": said("pid"),
        "version": said("version"),
        "queues": list(worker.queues),
        "slots_used": len(running),
        "slots_total": said("slots"),
        "running": running,
        "last_seen": when(worker, "last_seen"),
        "lost_at": when(worker, "lost_at"),
        "lost_reason": worker.lost_reason or None,
    }


def workers_dict(response: Any) -> dict[str, Any]:
    """{"workers": live ones by id, "lost": lost ones, latest first, "answered_by": node}."""
    return {
        "workers": [worker_dict(w) for w in response.workers],
        "lost": [worker_dict(w) for w in response.lost],
        "answered_by": response.freshness.node_id,
    }
