"""The Defer call of :class:`~raftsched.worker.grpc_transport.GrpcWorkerTransport`: an
attempt that raised ``TaskDeferred`` ends waiting on its trigger (docs/architecture.md §17);
its slot is free once the call returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raftsched.api.gen import common_pb2, worker_pb2
from raftsched.core.model import TaskKey


def report_defer(transport: Any, key: TaskKey, token: int, defer: Mapping[str, Any]) -> bool:
    """``defer``: ``Outcome.defer``. False = refused (the lease is no longer ours)."""
    fields = {k: v for k, v in defer.items() if v is not None}  # no timeout: left unset
    pb_key = common_pb2.TaskKey(dag_id=key.dag_id, run_id=key.run_id, task_id=key.task_id)
    request = worker_pb2.DeferRequest(
        worker_id=transport.worker_id, key=pb_key, token=token, **fields
    )
    return bool(transport._refusable("Defer", request))
