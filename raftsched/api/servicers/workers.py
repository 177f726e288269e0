"""WorkerService: leases (long poll), heartbeats, outcomes, logs, releases, all through Raft.

Invariant 3 (dispatch only after commit): a lease is answered only from the result of a
committed LeaseTasks command; the fencing token is that command's log index.

Long poll. ``Lease`` proposes LeaseTasks at once; when nothing was granted it waits on a
:class:`QueueSignal` (a Condition that an apply listener notifies whenever a committed
command leaves tasks queued), so a task queued on any node's replica wakes the waiting polls
of that node immediately, with no busy loop; then it proposes again, until ``wait_seconds``
(at most :data:`MAX_WAIT`) has passed. Each proposal's request id is the request's
``request_id`` plus ``#<attempt>``: a client retrying the same Lease replays the same
sequence and gets the grants it may have lost, instead of a second set.

Entries (each entry costs every node a write, an fsync and an apply). Every proposal goes
through the node's
:class:`~raftsched.api.servicers.worker_batch.CommandBatcher`: concurrent calls share one
entry. A waiting poll is a ``Rider``: its next LeaseTasks (same request id scheme) joins the
next entry that carries a success or a release, after them, so the task such an outcome
queues is leased in the same commit; the poll answers with what that LeaseTasks granted, or
waits again.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import grpc

from raftsched.api.gen import worker_pb2, worker_pb2_grpc
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.context import ApiContext
from raftsched.api.servicers.lease_assets import add_asset_events, outlet_extras
from raftsched.api.servicers.queue_signal import QueueSignal
from raftsched.api.servicers.worker_batch import CommandBatcher, Rider
from raftsched.api.servicers.worker_callbacks import CallbackRpcs
from raftsched.api.servicers.worker_reports import ReportRpcs
from raftsched.api.servicers.worker_roster import RosterRpcs, worker_info
from raftsched.api.servicers.worker_triggers import TriggerRpcs
from raftsched.api.status import invalid_argument, raise_for_result, translate_errors
from raftsched.cluster.proposer import new_request_id
from raftsched.core import commands as c
from raftsched.core import limits, xcom
from raftsched.core import results as r
from raftsched.core.model import DEFAULT_QUEUE, TaskKey
from raftsched.errors import LimitExceeded, StatusError
from raftsched.logging_setup import task_context

log = logging.getLogger(__name__)

MAX_WAIT = 30.0  # seconds a Lease may wait for work
MAX_TASKS = limits.MAX_LEASES_PER_CALL
MIN_LEASE_TTL = limits.MIN_LEASE_TTL_SECONDS
MAX_LEASE_TTL = limits.MAX_LEASE_TTL_SECONDS
MAX_REFS = limits.MAX_ITEMS_PER_COMMAND
CANCEL_CHECK = 1.0  # seconds between checks that the caller is still there
# A poll rides at once only on a node that heard from its leader this recently (seconds)
LEADER_CONTACT = 1.0


class WorkerServicer(
    CallbackRpcs, ReportRpcs, RosterRpcs, TriggerRpcs, worker_pb2_grpc.WorkerServiceServicer
):
    def __init__(self, ctx: ApiContext, signal: QueueSignal) -> None:
        self.ctx = ctx
        self.signal = signal
        # Concurrent calls' commands share Raft entries: an entry per call
        # was most of a task's cost on the nodes
        self.batcher = CommandBatcher(ctx)

    # -- Lease -------------------------------------------------------------------------------

    @translate_errors
    def Lease(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker_id = _worker_id(request.worker_id)
        terms = self._lease_terms(request, worker_id)
        queues = terms[2]
        wait = bounds.wait_seconds("wait_seconds", request.wait_seconds, MAX_WAIT)
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, max(0.0, remaining - 1.0))  # leave time to answer
        end = time.monotonic() + wait
        base = bounds.request_id(request.request_id) or new_request_id()
        attempt = 0

        def make() -> c.LeaseTasks:
            return self._lease_tasks(f"{base}#{attempt}", worker_id, terms)

        # the last LeaseTasks rode in another call's entry (worker_batch.Rider); a poll that
        # finds nothing queued for it here rides at once (see _nothing_to_lease)
        seen = self.signal.generation
        first = make().request_id
        rode = wait > 0 and self._nothing_to_lease(queues, first)
        while True:
            if attempt and not context.is_active():
                # The caller left while we waited (a dead worker): grant it nothing more.
                return worker_pb2.LeaseResponse()
            if not rode:
                seen = self.signal.generation
                command = make()
                attempt += 1
                result = self.batcher.propose(command, context)
                grants = self._grants(result)
                if grants:
                    return self._granted(grants, worker_id, base)
                if result.duplicate:
                    continue  # a retried Lease replaying its earlier attempts: no waiting
            rider = Rider(make(), self.signal.poke, context.is_active)
            self.batcher.ride(rider)
            try:
                woke = self._wait_for_work(seen, end, context, queues or (DEFAULT_QUEUE,), rider)
            finally:
                item = self.batcher.unride(rider)
            rode = item is not None
            if item is not None:  # its LeaseTasks went out with an outcome: its answer
                attempt += 1
                grants = self._grants(self.batcher.outcome(item, context))
                if grants:
                    return self._granted(grants, worker_id, base)
                if time.monotonic() >= end:
                    return worker_pb2.LeaseResponse()
            elif not woke:
                if not attempt and self.ctx.node.read(lambda st: st.remembers(first)):
                    # A retry of a poll whose first LeaseTasks this replica had not applied
                    # when it rode at once: proposed again now, it is answered its grants
                    rode = False
                    continue
                return worker_pb2.LeaseResponse()

    def _nothing_to_lease(self, queues: tuple[str, ...], first_request_id: str) -> bool:
        """True when this replica holds no task queued in ``queues`` and the poll's first
        LeaseTasks was never applied here: its proposal could grant nothing, yet would cost a
        Raft entry and a commit round during which an outcome's entry carries no rider for it
        (a chain's next step then waits for another round). Read after ``seen``: a task queued
        since wakes the poll, and a task this replica has not yet applied wakes it when it
        does. A retried poll whose first LeaseTasks was applied proposes as before (its
        grants are replayed, not waited for)."""
        wanted = frozenset(queues or (DEFAULT_QUEUE,))

        def check(st: Any) -> bool:
            queued = st.task_queue.queued_by_queue()
            return wanted.isdisjoint(queued) and not st.remembers(first_request_id)

        contact = getattr(self.ctx.node, "last_leader_contact", None)
        if contact is None or time.time() - contact > LEADER_CONTACT:
            return False  # cut off, perhaps: propose, so that the worker hears it and moves on
        return bool(self.ctx.node.read(check))

    @staticmethod
    def _grants(result: r.Result) -> tuple[Any, ...]:
        raise_for_result(result, detail=_detail(result, "LeaseTasks"))
        return tuple(result.value or ())

    def _granted(self, grants: tuple[Any, ...], worker_id: str, base: str) -> Any:
        for grant in grants:
            key = grant.lease.key
            log.debug(
                "leased %s/%s/%s try %d to %s",
                *(key.dag_id, key.run_id, key.task_id, grant.try_number, worker_id),
                extra=task_context(key, grant.try_number, request_id=base, worker_id=worker_id),
            )
        results = (
            self.ctx.node.read(lambda st, g=grants: _upstream_results(st, g))
            if any(g.task.upstream for g in grants)
            else {}
        )
        leases = [convert.task_lease(g, results.get(g.lease.key)) for g in grants]
        add_asset_events(self.ctx.node, grants, leases)  # an asset-triggered run's (§21)
        return worker_pb2.LeaseResponse(leases=leases)

    def _seen(self, worker_id: str, queues: tuple[str, ...], info: dict[str, Any]) -> None:
        """Note that the worker called, serving ``queues``: the "waiting" notes of tasks
        whose queue no live worker serves, and the workers page, come from these sightings."""
        if self.ctx.workers_seen is not None:
            self.ctx.workers_seen.seen(worker_id, queues or (DEFAULT_QUEUE,), info)

    def _wait_for_work(
        self,
        seen: int,
        end: float,
        context: grpc.ServicerContext,
        queues: tuple[str, ...],
        rider: Rider | None = None,
    ) -> bool:
        """Wait until tasks may be queued or ``rider``'s entry committed (True), or the wait
        is over / the caller left."""
        while True:
            left = end - time.monotonic()
            if left <= 0 or self.signal.closed or not context.is_active():
                return False
            if self.signal.wait(seen, min(left, CANCEL_CHECK), queues, rider):
                return True

    # -- Heartbeat, Complete, AppendLogs, Release --------------------------------------------

    @translate_errors
    def Heartbeat(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker_id = _worker_id(request.worker_id)
        ttl = self._ttl(request.lease_ttl_seconds, "lease_ttl_seconds")
        refs = _refs(request.leases)
        self._seen(worker_id, _queues(request.queues), worker_info(request))
        self.batcher.note_held(worker_id, len(refs))
        command = self.ctx.make(
            c.HeartbeatLeases,
            bounds.request_id(request.request_id),
            worker_id=worker_id,
            leases=refs,
            lease_ttl_seconds=ttl,
        )
        result = self.batcher.propose(command, context)
        if not isinstance(result.value, tuple):
            raise_for_result(result, detail=_detail(result, "heartbeat"))
        statuses = []
        for pb_ref, item in zip(request.leases, result.value or (), strict=False):
            status = worker_pb2.LeaseStatus(lease=pb_ref, ok=bool(item.ok), reason=item.reason)
            if item.ok and item.value is not None:
                status.expires_at.CopyFrom(convert.ts(item.value))
            statuses.append(status)
        return worker_pb2.HeartbeatResponse(leases=statuses)

    @translate_errors
    def Complete(self, request: Any, context: grpc.ServicerContext) -> Any:
        command = self._complete_command(request)
        result = self.batcher.propose(command, context)
        _raise_for_lease(result, command.key, request.token)
        return worker_pb2.CompleteResponse(state=convert.task_state_pb(result.value))

    def _complete_command(self, request: Any) -> c.CompleteAttempt:
        """A CompleteRequest's command, bounded (INVALID_ARGUMENT past a bound): Complete's,
        and each outcome's of CompleteBatch (worker_reports.py)."""
        worker_id = _worker_id(request.worker_id)
        key = bounds.key(request)
        exit_code = request.exit_code if request.HasField("exit_code") else None
        if exit_code is not None:
            bounds.count("exit_code", exit_code, limits.MIN_EXIT_CODE, limits.MAX_EXIT_CODE)
        return self.ctx.make(
            c.CompleteAttempt,
            bounds.request_id(request.request_id),
            key=key,
            token=bounds.token("token", request.token),
            success=request.success,
            exit_code=exit_code,
            message=bounds.message(request.message),  # truncated and sanitized, not refused
            chunks=_chunks(request.chunks),
            worker_id=worker_id,
            **_results(request),
            **outlet_extras(self.ctx, request, key),
        )

    @translate_errors
    def AppendLogs(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker_id = _worker_id(request.worker_id)
        key = bounds.key(request)
        chunks = _chunks(request.chunks)
        command = self.ctx.make(
            c.AppendLogs,
            bounds.request_id(request.request_id),
            key=key,
            token=bounds.token("token", request.token),
            chunks=chunks,
            worker_id=worker_id,
        )
        result = self.batcher.propose(command, context)
        _raise_for_lease(result, key, request.token)
        return worker_pb2.AppendLogsResponse(last_seq=int(result.value or 0))

    @translate_errors
    def Release(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker_id = _worker_id(request.worker_id)
        refs = _refs(request.leases)
        command = self.ctx.make(
            c.ReleaseLeases, bounds.request_id(request.request_id), worker_id=worker_id, leases=refs
        )
        result = self.batcher.propose(command, context)
        items = result.value if isinstance(result.value, tuple) else ()
        released = [pb for pb, item in zip(request.leases, items, strict=False) if item.ok]
        return worker_pb2.ReleaseResponse(released=released)

    def _next_lease_command(self, request: Any, worker_id: str) -> c.LeaseTasks | None:
        """CompleteBatch's ``next``: the LeaseTasks that rides after the outcomes, or None
        (not asked). Bounded as Lease's request is (INVALID_ARGUMENT)."""
        if not request.HasField("next") or request.next.max_tasks == 0:
            return None
        ask, worker_id = request.next, _worker_id(worker_id)
        if ask.worker_id and ask.worker_id != worker_id:
            raise invalid_argument("next.worker_id", ask.worker_id, "must be the outcomes' worker")
        base = bounds.request_id(ask.request_id)
        if not base:
            raise invalid_argument("next.request_id", ask.request_id, "must not be empty")
        terms = self._lease_terms(ask, worker_id, field_prefix="next.")
        # what a Lease with ``base`` proposes first: a replay returns it
        return self._lease_tasks(f"{base}#0", worker_id, terms)

    def _lease_terms(
        self, ask: Any, worker_id: str, *, field_prefix: str = ""
    ) -> tuple[int, float, tuple[str, ...]]:
        """A LeaseRequest's (max_tasks, TTL, queues), bounded (INVALID_ARGUMENT naming
        ``field_prefix`` + the field), for Lease and for CompleteBatch's ``next`` alike; the
        worker is noted as serving those queues."""
        max_tasks = bounds.count(f"{field_prefix}max_tasks", ask.max_tasks, 1, MAX_TASKS)
        ttl = self._ttl(ask.lease_ttl_seconds, f"{field_prefix}lease_ttl_seconds")
        queues = _queues(ask.queues)
        self._seen(worker_id, queues, worker_info(ask, f"{field_prefix}info"))
        return max_tasks, ttl, queues

    def _lease_tasks(
        self, request_id: str, worker_id: str, terms: tuple[int, float, tuple[str, ...]]
    ) -> c.LeaseTasks:
        max_tasks, ttl, queues = terms
        return self.ctx.make(
            c.LeaseTasks,
            request_id,
            worker_id=worker_id,
            max_tasks=max_tasks,
            lease_ttl_seconds=ttl,
            queues=queues,
        )

    def _ttl(self, value: float, field: str) -> float:
        """0: the server's default; else MIN_LEASE_TTL..MAX_LEASE_TTL seconds (finite)."""
        return bounds.seconds(
            field, value, MIN_LEASE_TTL, MAX_LEASE_TTL, default=self.ctx.default_lease_ttl
        )


def _worker_id(value: str, *, required: bool = True) -> str:
    if required and not value:
        raise invalid_argument("worker_id", value, "must not be empty")
    return bounds.ident("worker_id", value, required=required)


def _queues(values: Any) -> tuple[str, ...]:
    """The queues a worker names, sorted, each once; () for the default queue alone (so the
    command is the one a worker without queues sends)."""
    queues = tuple(sorted(set(bounds.ids("queues", values, limits.MAX_QUEUES_PER_WORKER))))
    return () if queues == (DEFAULT_QUEUE,) else queues


def _refs(leases: Any) -> tuple[c.LeaseRef, ...]:
    return bounds.lease_refs(leases)


def _chunks(chunks: Any) -> tuple[c.LogChunk, ...]:
    """Count and size bounded (INVALID_ARGUMENT); the text sanitized, never refused."""
    return bounds.log_chunks(chunks)


def _upstream_results(state: Any, grants: tuple[Any, ...]) -> dict[TaskKey, dict[str, str]]:
    """The return values each granted attempt's upstream tasks left (XCom): read from the
    replica that committed the lease, so the worker never reads the DB for them."""
    return {g.lease.key: xcom.upstream_results(state, g.lease.key) for g in grants}


def _results(request: Any) -> dict[str, Any]:
    """The attempt's XCom, branch choice and skip, bounded (INVALID_ARGUMENT past a bound).
    Only the fields set: a plain outcome commits the same command as before."""
    out: dict[str, Any] = {}
    if request.result_json:
        try:
            out["result_json"] = xcom.check_result_json("result_json", request.result_json)
        except LimitExceeded as err:
            raise invalid_argument("result_json", "(a return value)", str(err)) from None
    if request.is_branch:
        follow = tuple(request.follow)
        if len(follow) > limits.MAX_TASKS_PER_DAG:
            raise invalid_argument("follow", len(follow), "names too many tasks")
        for task_id in follow:
            bounds.ident("follow", task_id, required=True)
        out["follow"] = follow
    if request.skipped:
        out["skipped"] = True
    return out


def _detail(result: r.Result, what: str) -> str:
    if isinstance(result.value, str) and result.value:
        return result.value
    return f"{what} refused ({result.reason})"


def _raise_for_lease(result: r.Result, key: TaskKey, token: int) -> None:
    if result.ok:
        return
    task = f"{key.dag_id}/{key.run_id}/{key.task_id}"
    if result.reason == r.STALE_TOKEN:
        raise StatusError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"stale fencing token {token} for {task}: the lease expired and was granted"
            " again (or the task was cleared or marked); the worker must drop this attempt",
        )
    if result.reason == r.WRONG_WORKER:
        raise StatusError(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"fencing token {token} for {task} belongs to another worker; the worker must"
            " drop this attempt",
        )
    raise_for_result(result, dag_id=key.dag_id, run_id=key.run_id, task_id=key.task_id, token=token)
