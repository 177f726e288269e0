"""WorkerService's CompleteBatch: the outcomes of attempts that ended together, in one call.

A gRPC call costs the node more CPU than the commands it carries: 32 attempts
that end at once were 32 Complete calls. CompleteBatch carries them all; each outcome is
still its own CompleteAttempt command with its own request id (a retried outcome is answered
with its first result, whichever call or entry carried it) and gets its own answer, the
status its own Complete would have ended with. They are handed to the node's
``CommandBatcher`` together, so they share one Raft entry.

The call itself fails only when it cannot be read (INVALID_ARGUMENT: too many outcomes);
an outcome past a bound is answered INVALID_ARGUMENT alone, the others are applied; a
malformed ``next`` is ignored (logged), the outcomes are applied.

``next`` (the slots these outcomes free): a LeaseTasks for the worker goes in the same entry,
after the outcomes, so the task a success queued (a chain's next step) is leased in the
commit round of its upstream's outcome, whether or not the worker's long poll is open at
that moment; the grants come back with the answers. Its failure costs the outcomes nothing:
the call then answers them with no grants (the worker's poll leases as before).
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from raftsched.api.gen import worker_pb2
from raftsched.api.servicers import convert
from raftsched.api.status import invalid_argument, status_of, translate_errors
from raftsched.errors import StatusError

log = logging.getLogger(__name__)

MAX_OUTCOMES = 256  # outcomes per CompleteBatch (a worker sends at most 64)


class ReportRpcs:
    """Mixed into ``WorkerServicer`` (which provides ``batcher`` and ``_complete_command``)."""

    batcher: Any

    def _complete_command(self, request: Any) -> Any:  # pragma: no cover - WorkerServicer's
        raise NotImplementedError

    def _next_lease_command(self, request: Any, worker_id: str) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _granted(self, grants: tuple[Any, ...], worker_id: str, base: str) -> Any:
        raise NotImplementedError  # pragma: no cover - WorkerServicer's

    @staticmethod
    def _grants(result: Any) -> tuple[Any, ...]:  # pragma: no cover - WorkerServicer's
        raise NotImplementedError

    @translate_errors
    def CompleteBatch(self, request: Any, context: grpc.ServicerContext) -> Any:
        outcomes = list(request.outcomes)
        if len(outcomes) > MAX_OUTCOMES:
            raise invalid_argument("outcomes", len(outcomes), f"at most {MAX_OUTCOMES}")
        answers: list[Any] = [None] * len(outcomes)
        commands, where = [], []
        for i, outcome in enumerate(outcomes):
            try:
                commands.append(self._complete_command(outcome))
            except Exception as err:  # this outcome alone is refused (a bound)
                answers[i] = _failed(err)
                continue
            where.append(i)
        lease = self._next_lease(request) if commands else None
        asked = [*commands, lease] if lease is not None else commands
        results = self.batcher.propose_all(asked, context) if asked else []
        for i, command, result in zip(where, commands, results, strict=False):
            answers[i] = _answer(result, command.key, outcomes[i].token)
        response = worker_pb2.CompleteBatchResponse(answers=answers)
        if lease is not None:
            response.leases.extend(self._next_leases(lease, results[-1]))
        return response

    def _next_lease(self, request: Any) -> Any:
        """``next``'s LeaseTasks, or None: not asked, or malformed (logged: the outcomes are
        applied all the same, a worker's slots refill through its long poll)."""
        try:
            return self._next_lease_command(request, request.worker_id)
        except Exception as err:
            log.warning(
                "CompleteBatch of %r: its next lease is ignored: %s", request.worker_id, err
            )
            return None

    def _next_leases(self, lease: Any, result: Any) -> list[Any]:
        """What ``next``'s LeaseTasks granted, as Lease answers it; none if it failed."""
        try:
            if isinstance(result, Exception):
                raise result
            grants = self._grants(result)
        except Exception as err:  # the outcomes keep their own answers
            log.debug("CompleteBatch's next lease granted nothing: %s", err)
            return []
        if not grants:
            return []
        base = lease.request_id.rpartition("#")[0]
        return list(self._granted(grants, lease.worker_id, base).leases)


def _answer(result: Any, key: Any, token: int) -> Any:
    """What Complete would have answered for this result (or error)."""
    from raftsched.api.servicers.workers import _raise_for_lease  # one mapping for both

    if isinstance(result, Exception):
        return _failed(result)
    try:
        _raise_for_lease(result, key, token)
    except Exception as err:
        return _failed(err)
    return worker_pb2.CompleteAnswer(state=convert.task_state_pb(result.value))


def _failed(err: BaseException) -> Any:
    code, message = status_of(err)
    if code is grpc.StatusCode.INTERNAL and not isinstance(err, StatusError):
        log.error("unexpected error in an outcome of CompleteBatch", exc_info=err)
    return worker_pb2.CompleteAnswer(code=code.value[0], message=message)
