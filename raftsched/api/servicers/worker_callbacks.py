"""WorkerService's callback rpcs: LeaseCallbacks (long poll) and CompleteCallback.

A callback job (``core/callbacks.py``) is leased like a task: the grant is the result of a
committed ``LeaseCallbacks`` command (invariant 3), its token that command's log index. The
long poll (``lease_poll.py``) proposes once, then reads this node's replica for a leasable
job every :data:`~raftsched.api.servicers.lease_poll.POLL_INTERVAL` and proposes again only
when it sees one, so an idle worker's poll puts one entry in the Raft log per call.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc

from raftsched.api.gen import worker_pb2
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.lease_poll import poll_for_grants
from raftsched.api.status import raise_for_result, translate_errors
from raftsched.core import commands as c
from raftsched.core import handlers_callbacks as hc
from raftsched.core import limits
from raftsched.core import results as r
from raftsched.core.model import TaskKey
from raftsched.errors import StatusError

MAX_WAIT = 30.0
MAX_JOBS = 64
DEFAULT_TTL = 120.0


class CallbackRpcs:
    """Mixed into ``WorkerServicer`` (which provides ``ctx`` and ``signal``)."""

    ctx: Any
    signal: Any

    @translate_errors
    def LeaseCallbacks(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker_id = bounds.ident("worker_id", request.worker_id)
        max_jobs = bounds.count("max_jobs", request.max_jobs, 1, MAX_JOBS)
        wait = bounds.wait_seconds("wait_seconds", request.wait_seconds, MAX_WAIT)
        ttl = bounds.seconds(
            "lease_ttl_seconds",
            request.lease_ttl_seconds,
            limits.MIN_LEASE_TTL_SECONDS,
            limits.MAX_LEASE_TTL_SECONDS,
            default=DEFAULT_TTL,
        )
        grants = poll_for_grants(
            self.ctx,
            self.signal,
            context,
            name="LeaseCallbacks",
            wait=wait,
            request_id=bounds.request_id(request.request_id),
            command_for=lambda request_id: self.ctx.make(
                c.LeaseCallbacks,
                request_id,
                worker_id=worker_id,
                max_jobs=max_jobs,
                lease_ttl_seconds=ttl,
            ),
            any_leasable=self._any_leasable,
        )
        return worker_pb2.LeaseCallbacksResponse(jobs=[_lease_pb(g) for g in grants])

    def _any_leasable(self) -> bool:
        now = datetime.now(UTC)
        found, _ = self.ctx.read(lambda st: next(st.callbacks.leasable(now), None) is not None)
        return bool(found)

    @translate_errors
    def CompleteCallback(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker_id = bounds.ident("worker_id", request.worker_id)
        job_id = request.job_id
        if not job_id or len(job_id) > hc.MAX_JOB_ID_CHARS:
            raise StatusError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"job_id must be 1..{hc.MAX_JOB_ID_CHARS} characters",
            )
        command = self.ctx.make(
            c.CompleteCallback,
            bounds.request_id(request.request_id),
            worker_id=worker_id,
            job_id=limits.clean_text(job_id),
            token=bounds.token("token", request.token),
            success=request.success,
            message=bounds.message(request.message),
            chunks=bounds.log_chunks(request.chunks),
        )
        result = self.ctx.propose(command, context)
        if not result.ok:
            if result.reason in (r.STALE_TOKEN, r.WRONG_WORKER, hc.UNKNOWN_CALLBACK):
                raise StatusError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"callback job {job_id[:200]} is not leased to this worker with token"
                    f" {request.token} ({result.reason}); the worker must drop its outcome",
                )
            raise_for_result(result)
        return worker_pb2.CompleteCallbackResponse(state=str(result.value or ""))


def _lease_pb(grant: dict[str, Any]) -> Any:
    key = TaskKey(grant["dag_id"], grant["run_id"], grant["task_id"])
    return worker_pb2.CallbackLease(
        job_id=grant["job_id"],
        token=grant["token"],
        key=convert.task_key(key),
        try_number=grant["try_number"],
        event=grant["event"],
        callable=grant["callable_ref"],
        kwargs_json=grant["kwargs_json"],
        fileloc=grant["fileloc"],
        context_json=grant["context_json"],
        attempt=grant["attempt"],
    )
