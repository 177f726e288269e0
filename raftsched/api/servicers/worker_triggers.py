"""WorkerService's trigger rpcs: Defer (a worker), LeaseTriggers (long poll),
HeartbeatTriggers and FireTriggers (a triggerer). docs/architecture.md §17.

A triggerer is leased triggers like a worker tasks: the grant is the result of a committed
``LeaseTriggers`` command (invariant 3), its token that command's log index. The long poll is
the callback jobs' one (``lease_poll.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import grpc

from raftsched.api.gen import worker_pb2
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.external_state import ExternalStateRpcs
from raftsched.api.servicers.lease_poll import poll_for_grants
from raftsched.api.status import raise_for_result, translate_errors
from raftsched.core import commands as c
from raftsched.core import handlers_triggers as htr
from raftsched.core import limits
from raftsched.core import results as r
from raftsched.core.model import TaskKey
from raftsched.errors import StatusError

MAX_WAIT = 30.0
MAX_TRIGGERS = 1_000  # per LeaseTriggers call
DEFAULT_TTL = 10.0
_REFUSED = (r.STALE_TOKEN, r.WRONG_WORKER, r.UNKNOWN_TASK)


def _ttl(value: float) -> float:
    return bounds.seconds(
        "lease_ttl_seconds",
        value,
        limits.MIN_LEASE_TTL_SECONDS,
        limits.MAX_LEASE_TTL_SECONDS,
        default=DEFAULT_TTL,
    )


def _json(field: str, text: str, default: str, most: int, *, obj: bool = True) -> str:
    text = text or default
    htr.check_json_text(field, text, most, obj=obj)
    return text


class TriggerRpcs(ExternalStateRpcs):
    """Mixed into ``WorkerServicer`` (which provides ``ctx`` and ``signal``); with
    ExternalRunState, a triggerer's read under a trigger's lease."""

    ctx: Any
    signal: Any

    @translate_errors
    def Defer(self, request: Any, context: grpc.ServicerContext) -> Any:
        timeout = None
        if request.HasField("timeout_seconds"):
            timeout = limits.check_float(
                "timeout_seconds",
                request.timeout_seconds,
                htr.MIN_TRIGGER_TIMEOUT_SECONDS,
                limits.MAX_DURATION_SECONDS,
            )
        command = self.ctx.make(
            c.DeferTask,
            bounds.request_id(request.request_id),
            worker_id=bounds.ident("worker_id", request.worker_id),
            key=bounds.key(request),
            token=bounds.token("token", request.token),
            kind=bounds.text("kind", request.kind, htr.MAX_TRIGGER_KIND_CHARS),
            args_json=_json("args_json", request.args_json, "{}", htr.MAX_TRIGGER_ARGS_BYTES),
            method_name=_method(request.method_name),
            kwargs_json=_json("kwargs_json", request.kwargs_json, "{}", htr.MAX_TRIGGER_ARGS_BYTES),
            timeout_seconds=timeout,
            chunks=bounds.log_chunks(request.chunks),
        )
        result = self.ctx.propose(command, context)
        if not result.ok:
            if result.reason in _REFUSED:
                raise StatusError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"the lease of {command.key.task_id} with token {request.token} is not"
                    f" this worker's ({result.reason}); the worker must drop the attempt",
                )
            raise_for_result(result)
        return worker_pb2.DeferResponse(state=str(result.value or ""))

    @translate_errors
    def LeaseTriggers(self, request: Any, context: grpc.ServicerContext) -> Any:
        triggerer_id = bounds.ident("triggerer_id", request.triggerer_id)
        most = bounds.count("max_triggers", request.max_triggers, 1, MAX_TRIGGERS)
        wait = bounds.wait_seconds("wait_seconds", request.wait_seconds, MAX_WAIT)
        ttl = _ttl(request.lease_ttl_seconds)
        grants = poll_for_grants(
            self.ctx,
            self.signal,
            context,
            name="LeaseTriggers",
            wait=wait,
            request_id=bounds.request_id(request.request_id),
            command_for=lambda request_id: self.ctx.make(
                c.LeaseTriggers,
                request_id,
                triggerer_id=triggerer_id,
                max_triggers=most,
                lease_ttl_seconds=ttl,
            ),
            any_leasable=self._any_trigger_leasable,
        )
        return worker_pb2.LeaseTriggersResponse(triggers=[_trigger_pb(g) for g in grants])

    def _any_trigger_leasable(self) -> bool:
        now = datetime.now(UTC)
        found, _ = self.ctx.read(lambda st: next(st.triggers.leasable(now), None) is not None)
        return bool(found)

    @translate_errors
    def HeartbeatTriggers(self, request: Any, context: grpc.ServicerContext) -> Any:
        refs = tuple(_ref(ref, f"triggers[{i}]") for i, ref in enumerate(request.triggers))
        limits.check_count("triggers", len(refs), limits.MAX_ITEMS_PER_COMMAND)
        command = self.ctx.make(
            c.HeartbeatTriggers,
            bounds.request_id(request.request_id),
            triggerer_id=bounds.ident("triggerer_id", request.triggerer_id),
            triggers=refs,
            lease_ttl_seconds=_ttl(request.lease_ttl_seconds),
        )
        items = _items(self.ctx.propose(command, context))
        return worker_pb2.HeartbeatTriggersResponse(ok=[item.ok for item in items])

    @translate_errors
    def FireTriggers(self, request: Any, context: grpc.ServicerContext) -> Any:
        limits.check_count("firings", len(request.firings), limits.MAX_LEASES_PER_CALL)
        firings = tuple(
            c.TriggerFiring(
                _ref(f.ref, f"firings[{i}].ref"),
                _json(f"firings[{i}].event_json", f.event_json, "null", 65_536, obj=False),
                bounds.truncate(limits.clean_text(f.error), htr.MAX_TRIGGER_ERROR_CHARS),
            )
            for i, f in enumerate(request.firings)
        )
        command = self.ctx.make(
            c.FireTriggers,
            bounds.request_id(request.request_id),
            triggerer_id=bounds.ident("triggerer_id", request.triggerer_id),
            firings=firings,
        )
        items = _items(self.ctx.propose(command, context))
        return worker_pb2.FireTriggersResponse(
            refused=["" if item.ok else item.reason for item in items]
        )


def _items(result: Any) -> tuple[Any, ...]:
    """Per-item answers; a command refused as a whole (INVALID, HALTED) raises."""
    if isinstance(result.value, tuple) and all(isinstance(i, r.Item) for i in result.value):
        return result.value
    raise_for_result(result)
    return ()


def _ref(pb: Any, where: str) -> c.TriggerRef:
    return c.TriggerRef(bounds.key(pb, "key"), bounds.token(f"{where}.token", pb.token))


def _trigger_pb(grant: dict[str, Any]) -> Any:
    key = TaskKey(grant["dag_id"], grant["run_id"], grant["task_id"])
    expires = datetime.fromisoformat(grant["expires_at"])
    return worker_pb2.TriggerLease(
        key=convert.task_key(key),
        token=grant["token"],
        try_number=grant["try_number"],
        kind=grant["kind"],
        args_json=grant["args_json"],
        fileloc=grant["fileloc"],
        expires_at=convert.ts(expires),
    )


def _method(name: str) -> str:
    """The resumption's method: a name of the DAG file or a TaskFlow task's; "raftsched:..."
    names are the core's own (a TriggerDagRunOperator's wait, core/dagrun_trigger.py)."""
    if name.startswith("raftsched:"):
        raise StatusError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"method_name {name[:100]!r} is reserved (raftsched:...); name a function of the"
            " DAG file",
        )
    return name or "execute_complete"
