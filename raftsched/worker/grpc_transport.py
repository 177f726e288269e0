"""The real :class:`~raftsched.worker.transport.WorkerTransport`: WorkerService over gRPC.

Built on :class:`raftsched.api.client.RaftschedClient`, which fails over between nodes,
retries UNAVAILABLE and fills each request's ``request_id`` (so a retried Lease returns the
same grants and a retried Complete is applied once). Mapping of outcomes:

- NoQuorumError (every node unavailable) and other ApiErrors propagate: the worker logs them
  at info and tries again later.
- FAILED_PRECONDITION (stale token) and NOT_FOUND (the run is gone) on Complete/AppendLogs
  mean "refused": False.
- UNAUTHENTICATED / PERMISSION_DENIED raise :class:`WorkerRejected`: retrying cannot help,
  the worker stops with that message. So does INVALID_ARGUMENT on Lease (a worker id or a
  lease_ttl past the cluster's bounds): every later Lease would be refused the same way.
- RESOURCE_EXHAUSTED (the cluster's outbox is at its hard cap: the metadata DB is behind)
  propagates like any ApiError: leases and log appends are tried again later.

Long polls go through ``poll_client`` when given: a client of their own, which
:meth:`~GrpcWorkerTransport.interrupt` closes, so that an outstanding Lease ends at once
(gRPC cancels every call on a closed channel, and the server stops waiting for the caller).
Without one, an outstanding poll runs to its end (up to its ``wait_seconds``, or its deadline
when no node answers) and only later polls are skipped.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import common_pb2, worker_pb2
from raftsched.core.model import DEFAULT_QUEUE, TaskKey
from raftsched.errors import ApiError, WorkerRejected
from raftsched.worker.defer_call import report_defer
from raftsched.worker.logs import clean_output, outcome_message
from raftsched.worker.reports import Report
from raftsched.worker.transport import Assignment

REFUSED = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND)
REJECTED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
UNAUTHENTICATED = (grpc.StatusCode.UNAUTHENTICATED,)
# CompleteBatch on a release without it: UNIMPLEMENTED, or PERMISSION_DENIED from a token check
# that takes an unknown method for an admin's (the worker then sends Complete calls)
UNSUPPORTED = (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED)
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class GrpcWorkerTransport:
    """Thread-safe (the clients are). ``lease_ttl``: lease lifetime asked for at Lease and each
    Heartbeat (0: the server's default). ``access``: servers, token and tls_ca, for the death
    report (see ``_last_words``). ``worker_id`` is learnt from the first ``lease()``
    when not given; Complete and AppendLogs carry it. ``poll_client``: see the module
    docstring; the transport closes it on :meth:`interrupt`, the caller closes ``client``."""

    def __init__(
        self,
        client: RaftschedClient,
        *,
        poll_client: RaftschedClient | None = None,
        worker_id: str = "",
        lease_ttl: float = 0.0,
        access: Mapping[str, Any] | None = None,
        queues: Sequence[str] = (),
    ) -> None:
        self.client = client
        self._access = dict(access) if access is not None else None
        # The queues this worker leases from; () means the default queue (sent as none, so
        # a cluster still on a release without queues takes the Lease as before).
        self.queues = () if tuple(queues) == (DEFAULT_QUEUE,) else tuple(queues)
        # Called with (request_id, max_tasks) before each Lease is sent: the worker tells its
        # supervisor, whose death report replays the poll to hand back what it granted.
        self.on_poll: Callable[[str, int], None] | None = None
        self.poll_client = poll_client or client
        self.worker_id = worker_id
        self.lease_ttl = lease_ttl
        self._interrupted = threading.Event()
        self._call_timeout: float | None = None  # set by interrupt(): the cap of every call
        self.info: Any = None  # a WorkerInfo for the workers page (worker/sign_off.py)

    def lease(self, worker_id: str, max_tasks: int, wait_seconds: float) -> list[Assignment]:
        self.worker_id = self.worker_id or worker_id
        if self._interrupted.is_set():
            return []
        request = worker_pb2.LeaseRequest(
            worker_id=worker_id,
            max_tasks=max_tasks,
            wait_seconds=wait_seconds,
            lease_ttl_seconds=self.lease_ttl,
            queues=self.queues,
            info=self.info,
        )
        if self.on_poll is not None:
            request.request_id = uuid.uuid4().hex
            self.on_poll(request.request_id, max_tasks)
        timeout = wait_seconds + self.poll_client.deadline
        try:
            response = self._call("Lease", request, timeout=timeout, client=self.poll_client)
        except ApiError as err:
            if err.code is grpc.StatusCode.INVALID_ARGUMENT:
                raise WorkerRejected(f"the cluster refuses this worker's leases: {err}") from None
            if self._interrupted.is_set():
                return []
            raise
        except Exception:
            # Closed under it by interrupt(): CANCELLED, or "closed" when between attempts.
            if self._interrupted.is_set():
                return []
            raise
        return [assignment_from(lease) for lease in response.leases]

    def last_words(self) -> dict[str, Any] | None:
        """How the worker's supervisor reaches the cluster to report a dead worker's attempts
        (servers, token, tls_ca: ``access``), or None when not given (no death report)."""
        if self._access is None:
            return None
        # its queues too: the last poll is replayed as it was sent
        info = {"info": MessageToDict(self.info)} if self.info is not None else {}
        return {**self._access, **({"queues": list(self.queues)} if self.queues else {}), **info}

    def heartbeat(
        self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]
    ) -> dict[TaskKey, bool]:
        request = worker_pb2.HeartbeatRequest(
            worker_id=worker_id,
            leases=[_lease_ref(key, token) for key, token in leases],
            lease_ttl_seconds=self.lease_ttl,
            queues=self.queues,
            info=self.info,
        )
        response = self._call("Heartbeat", request)
        return {_task_key(status.lease.key): status.ok for status in response.leases}

    def complete(
        self,
        key: TaskKey,
        token: int,
        *,
        success: bool,
        exit_code: int | None,
        message: str,
        result_json: str = "",
        follow: Sequence[str] | None = None,
        skipped: bool = False,
        outlet_extras: Sequence[tuple[str, str]] = (),
        request_id: str = "",
    ) -> bool:
        rest = (
            result_json,
            None if follow is None else tuple(follow),
            skipped,
            tuple(outlet_extras),
        )
        report = Report(key, token, success, exit_code, message, request_id, *rest)
        return self._refusable("Complete", self._complete_request(report))

    def _complete_request(self, report: Report) -> Any:
        """The CompleteRequest of one outcome (alone, or one of a CompleteBatch's)."""
        return worker_pb2.CompleteRequest(
            worker_id=self.worker_id,
            key=_pb_key(report.key),
            token=report.token,
            success=report.success,
            exit_code=report.exit_code,
            message=outcome_message(report.message),  # protobuf cannot carry a lone surrogate
            result_json=report.result_json,
            is_branch=report.follow is not None,
            follow=list(report.follow or ()),
            skipped=report.skipped,
            outlet_extras=dict(report.outlet_extras),
            request_id=report.request_id,  # "": the client fills one
        )

    def complete_many(self, reports: Sequence[Report]) -> list[bool | ApiError] | None:
        """Several outcomes in one CompleteBatch call (worker.reports): per outcome True
        (applied), False (refused, as ``complete``) or the ApiError its own Complete would
        have raised; None when the cluster has no CompleteBatch (an older release: it answers
        UNIMPLEMENTED, or PERMISSION_DENIED where its token check does not know the method)."""
        return self.complete_and_lease(reports, "", 0)[0]

    def complete_and_lease(
        self, reports: Sequence[Report], request_id: str, max_tasks: int
    ) -> tuple[list[bool | ApiError] | None, list[Assignment]]:
        """``complete_many``, and with ``max_tasks`` > 0 a lease of up to that many more tasks
        in the same Raft entry (CompleteBatchRequest.next, its request id ``request_id``): the
        answers, and what it granted (none from a cluster that does not know ``next``)."""
        request = worker_pb2.CompleteBatchRequest(
            worker_id=self.worker_id,
            outcomes=[self._complete_request(r) for r in reports],
        )
        if max_tasks > 0:
            request.next.CopyFrom(
                worker_pb2.LeaseRequest(
                    worker_id=self.worker_id,
                    max_tasks=max_tasks,
                    lease_ttl_seconds=self.lease_ttl,
                    request_id=request_id,
                    queues=self.queues,
                    info=self.info,
                )
            )
        try:
            response = self._call("CompleteBatch", request, rejected=UNAUTHENTICATED)
        except ApiError as err:
            if err.code in UNSUPPORTED:
                return None, []
            raise
        if len(response.answers) != len(reports):
            raise ApiError(
                grpc.StatusCode.INTERNAL,
                f"{len(response.answers)} answers to {len(reports)} outcomes",
                method="CompleteBatch",
            )
        return [_answer(a) for a in response.answers], [
            assignment_from(lease) for lease in response.leases
        ]

    def append_logs(self, key: TaskKey, token: int, chunks: Sequence[tuple[str, str]]) -> bool:
        request = worker_pb2.AppendLogsRequest(
            worker_id=self.worker_id,
            key=_pb_key(key),
            token=token,
            chunks=[
                common_pb2.LogText(stream=stream, text=clean_output(text))
                for stream, text in chunks
            ],
        )
        return self._refusable("AppendLogs", request)

    def resolve_secrets(
        self,
        key: TaskKey,
        token: int,
        worker_id: str,
        variables: Sequence[str],
        connections: Sequence[str],
        on_demand: bool = False,
    ) -> dict[tuple[str, str], str]:
        from raftsched.api.gen import secret_pb2

        request = secret_pb2.ResolveSecretsRequest(
            key=_pb_key(key),
            token=token,
            worker_id=worker_id,
            variables=list(variables),
            connections=list(connections),
            on_demand=on_demand,  # undeclared: the node records the read (secret_channel)
        )
        timeout = self.client.deadline
        if self._call_timeout is not None:
            timeout = min(timeout, self._call_timeout)
        response = self.client.secrets.ResolveSecrets(request, timeout=timeout)
        return {(v.kind, v.key): v.value for v in response.values}

    def lease_callbacks(self, worker_id: str, max_jobs: int, wait_seconds: float) -> list[Any]:
        """Callback jobs (``CallbackLease`` messages); [] when none came or once stopping."""
        if self._interrupted.is_set():
            return []
        request = worker_pb2.LeaseCallbacksRequest(
            worker_id=worker_id, max_jobs=max_jobs, wait_seconds=wait_seconds
        )
        timeout = wait_seconds + self.poll_client.deadline
        try:
            response = self._call(
                "LeaseCallbacks", request, timeout=timeout, client=self.poll_client
            )
        except Exception:
            if self._interrupted.is_set():
                return []
            raise
        return list(response.jobs)

    def complete_callback(
        self, worker_id: str, job_id: str, token: int, *, success: bool, message: str, output: str
    ) -> bool:
        """A callback job's outcome; False = refused (its lease is no longer ours)."""
        request = worker_pb2.CompleteCallbackRequest(
            worker_id=worker_id,
            job_id=job_id,
            token=token,
            success=success,
            message=outcome_message(message),
            chunks=[common_pb2.LogText(stream="stdout", text=clean_output(output))]
            if output
            else [],
        )
        return self._refusable("CompleteCallback", request)

    defer = report_defer  # the attempt deferred (worker.defer_call)

    def release(self, worker_id: str, leases: Sequence[tuple[TaskKey, int]]) -> None:
        request = worker_pb2.ReleaseRequest(
            worker_id=worker_id, leases=[_lease_ref(key, token) for key, token in leases]
        )
        self._call("Release", request)

    def interrupt(self, call_timeout: float) -> None:
        self._call_timeout = call_timeout
        self._interrupted.set()
        if self.poll_client is not self.client:
            self.poll_client.close()

    def _refusable(self, method: str, request: Any) -> bool:
        try:
            self._call(method, request)
        except ApiError as err:
            if err.code in REFUSED:
                return False
            raise
        return True

    def _call(
        self,
        method: str,
        request: Any,
        *,
        timeout: float | None = None,
        client: RaftschedClient | None = None,
        rejected: tuple[grpc.StatusCode, ...] = REJECTED,
    ) -> Any:
        client = client or self.client
        timeout = timeout or client.deadline
        if self._call_timeout is not None:
            timeout = min(timeout, self._call_timeout)
        try:
            return getattr(client.workers, method)(request, timeout=timeout)
        except ApiError as err:
            if err.code in rejected:
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
        params_json=lease.params_json,
        upstream_results=dict(lease.upstream_results),
        skip_on_exit_code=lease.skip_on_exit_code if lease.HasField("skip_on_exit_code") else None,
        resume_json=lease.resume_json,
        asset_events_json=lease.asset_events_json,
    )


def _answer(answer: Any) -> bool | ApiError:
    """One CompleteAnswer as ``complete`` would have ended: True, False (refused), or an
    ApiError (unanswered or invalid: the worker retries it as a failed Complete)."""
    code = _CODES.get(answer.code, grpc.StatusCode.UNKNOWN)
    if code is grpc.StatusCode.OK:
        return True
    if code in REFUSED:
        return False
    return ApiError(code, answer.message, method="CompleteBatch")


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
