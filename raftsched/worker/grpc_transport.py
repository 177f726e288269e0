"""The real :class:`~raftsched.worker.transport.WorkerTransport`: WorkerService over gRPC.

Built on :class:`raftsched.api.client.RaftschedClient`, which fails over between nodes,
retries UNAVAILABLE and fills each request's ``request_id`` (so a retried Lease returns the
same grants and a retried Complete is applied once). Mapping of outcomes:

- NoQuorumError (every node unavailable) and other ApiErrors propagate: the worker logs them
  at info and tries again later.
- FAILED_PRECONDITION (stale token) and NOT_FOUND (the run is gone) on Complete/AppendLogs
  mean "refused": False.
- UNAUTHENTICATED / PERMISSION_DENIED raise :class:`WorkerRejected`: retrying cannot help,
  the worker stops with that message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC
from typing import Any

import grpc

from raftsched.api.client import ApiError, RaftschedClient
from raftsched.api.gen import common_pb2, worker_pb2
from raftsched.core.model import TaskKey
from raftsched.worker.transport import Assignment, WorkerRejected

REFUSED = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND)
REJECTED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class GrpcWorkerTransport:
    """Thread-safe (the client is). ``lease_ttl``: lease lifetime asked for at Lease and each
    Heartbeat (0: the server's default). ``worker_id`` is learnt from the first ``lease()``
    when not given; Complete and AppendLogs carry it."""

    def __init__(
        self, client: RaftschedClient, *, worker_id: str = "", lease_ttl: float = 0.0
    ) -> None:
        self.client = client
        self.worker_id = worker_id
        self.lease_ttl = lease_ttl

    def lease(self, worker_id: str, max_tasks: int, wait_seconds: float) -> list[Assignment]:
        self.worker_id = self.worker_id or worker_id
        request = worker_pb2.LeaseRequest(
            worker_id=worker_id,
            max_tasks=max_tasks,
            wait_seconds=wait_seconds,
            lease_ttl_seconds=self.lease_ttl,
        )
        response = self._call("Lease", request, timeout=wait_seconds + self.client.deadline)
        return [assignment_from(lease) for lease in response.leases]

    def heartbeat(
        self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]
    ) -> dict[TaskKey, bool]:
        request = worker_pb2.HeartbeatRequest(
            worker_id=worker_id,
            leases=[_lease_ref(key, token) for key, token in leases],
            lease_ttl_seconds=self.lease_ttl,
        )
        response = self._call("Heartbeat", request)
        return {_task_key(status.lease.key): status.ok for status in response.leases}

    def complete(
        self, key: TaskKey, token: int, *, success: bool, exit_code: int | None, message: str
    ) -> bool:
        request = worker_pb2.CompleteRequest(
            worker_id=self.worker_id,
            key=_pb_key(key),
            token=token,
            success=success,
            exit_code=exit_code,
            message=message,
        )
        return self._refusable("Complete", request)

    def append_logs(self, key: TaskKey, token: int, chunks: Sequence[tuple[str, str]]) -> bool:
        request = worker_pb2.AppendLogsRequest(
            worker_id=self.worker_id,
            key=_pb_key(key),
            token=token,
            chunks=[common_pb2.LogText(stream=stream, text=text) for stream, text in chunks],
        )
        return self._refusable("AppendLogs", request)

    def release(self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]) -> None:
        request = worker_pb2.ReleaseRequest(
            worker_id=worker_id, leases=[_lease_ref(key, token) for key, token in leases]
        )
        self._call("Release", request)

    def _refusable(self, method: str, request: Any) -> bool:
        try:
            self._call(method, request)
        except ApiError as err:
            if err.code in REFUSED:
                return False
            raise
        return True

    def _call(self, method: str, request: Any, *, timeout: float | None = None) -> Any:
        try:
            return getattr(self.client.workers, method)(request, timeout=timeout)
        except ApiError as err:
            if err.code in REJECTED:
                raise WorkerRejected(f"the cluster rejected this worker: {err}") from None
            raise


def assignment_from(lease: Any) -> Assignment:
    """A ``TaskLease`` message as an :class:`Assignment`."""
    return Assignment(
        key=_task_key(lease.key),
        token=lease.token,
        try_number=lease.try_number,
        kind=lease.kind,
        command=lease.command,
        env=tuple(sorted(lease.env.items())),
        callable_name=lease.callable_name,
        kwargs=_json_object(lease.kwargs_json, "kwargs_json"),
        fileloc=lease.fileloc,
        execution_timeout=(
            lease.execution_timeout_seconds if lease.HasField("execution_timeout_seconds") else None
        ),
        logical_date=_iso(lease, "logical_date"),
        data_interval_start=_iso(lease, "data_interval_start"),
        data_interval_end=_iso(lease, "data_interval_end"),
        conf=_json_object(lease.conf_json, "conf_json"),
    )


def _json_object(text: str, what: str) -> dict[str, Any]:
    value = json.loads(text) if text else {}
    if not isinstance(value, dict):
        raise ValueError(f"{what} of a lease is not a JSON object: {text[:200]!r}")
    return value


def _iso(message: Any, field: str) -> str:
    if not message.HasField(field):
        return ""
    return getattr(message, field).ToDatetime(tzinfo=UTC).isoformat()


def _task_key(key: Any) -> TaskKey:
    return TaskKey(key.dag_id, key.run_id, key.task_id)


def _pb_key(key: TaskKey) -> common_pb2.TaskKey:
    return common_pb2.TaskKey(dag_id=key.dag_id, run_id=key.run_id, task_id=key.task_id)


def _lease_ref(key: TaskKey, token: int) -> worker_pb2.LeaseRef:
    return worker_pb2.LeaseRef(key=_pb_key(key), token=token)
