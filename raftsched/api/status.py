"""Errors and refusals as gRPC status codes, each with a message a person can act on.

The servicers use three things from here:

- :func:`translate_errors`, a decorator for servicer methods (unary or server-streaming): a
  :class:`StatusError` or a raftsched error raised inside becomes ``context.abort(code, msg)``;
  anything unexpected is logged with its traceback and answered INTERNAL without details.
- :func:`raise_for_result`, which turns a refused ``core.results.Result`` (or one refused
  ``Item``) into a :class:`StatusError` via the reason table :data:`REASON_CODES`.
- :func:`invalid_argument` and :func:`no_quorum`, for the two messages that need data the
  exceptions do not carry (the field name; how many nodes are reachable).

Mapping (docs/architecture.md §6; each error class names its code in ``raftsched.errors``):
NoQuorumError -> UNAVAILABLE (retry, maybe elsewhere); CommitTimeout -> DEADLINE_EXCEEDED
(the outcome is unknown: retry with the same request id); DagNotFound and unknown
runs/tasks -> NOT_FOUND; DagDefinitionError and bad fields -> INVALID_ARGUMENT naming the
field; a stale fencing token -> FAILED_PRECONDITION; StoreUnavailable -> UNAVAILABLE;
LimitExceeded (a value past a bound of core.limits) -> INVALID_ARGUMENT with its message;
OutboxFull and the reason "outbox_full" -> RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import grpc

from raftsched.core import limits
from raftsched.core import results as r
from raftsched.errors import (
    LimitExceeded,
    NoQuorumError,
    OutboxFull,
    RaftschedError,
    StatusError,
    StoreUnavailable,
)

log = logging.getLogger(__name__)

Code = grpc.StatusCode
# The core's reason for leases and log appends refused at the outbox's hard cap (the constant
# may not exist yet in every release of core.results).
OUTBOX_FULL: str = getattr(r, "OUTBOX_FULL", "outbox_full")
OUTBOX_HARD_CAP_ENTRIES: int = getattr(limits, "OUTBOX_HARD_CAP_ENTRIES", 200_000)
F = TypeVar("F", bound=Callable[..., Any])

STATUS_HINT = "retry, or check `raftsched cluster status`"


def invalid_argument(field: str, value: Any, expected: str) -> StatusError:
    """INVALID_ARGUMENT naming the request field: ``conf_json = '[1]': expected a JSON object``."""
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return StatusError(Code.INVALID_ARGUMENT, f"{field} = {shown}: {expected}")


def no_quorum(reachable: int, total: int) -> NoQuorumError:
    return NoQuorumError(
        f"no quorum: {reachable} of {total} nodes reachable; {STATUS_HINT}",
        reachable=reachable,
        total=total,
    )


def status_of(err: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message for an exception (the one mapping: each raftsched error
    names its code, ``RaftschedError.status``); INTERNAL for anything unexpected."""
    if isinstance(err, StatusError):
        return err.code, err.message
    if isinstance(err, RaftschedError):
        code = getattr(Code, err.status, Code.FAILED_PRECONDITION)
        if isinstance(err, NoQuorumError):
            return code, str(err) or f"no quorum; {STATUS_HINT}"
        if isinstance(err, StoreUnavailable):
            return code, f"metadata database unavailable: {err}; retry later"
        return code, str(err)
    if isinstance(err, ValueError):
        return Code.INVALID_ARGUMENT, str(err)
    return Code.INTERNAL, "internal error; the answering node's log has the traceback"


# reason -> (code, message template). Templates may use {dag_id}, {run_id}, {task_id},
# {token}, {reason} and {detail} (the result's text value, else the reason); raise_for_result
# fills the ones it is given and drops the rest.
REASON_CODES: dict[str, tuple[grpc.StatusCode, str]] = {
    r.UNKNOWN_DAG: (
        Code.NOT_FOUND,
        "DAG {dag_id} not found; `raftsched dags list` shows the known DAGs",
    ),
    r.INACTIVE_DAG: (
        Code.FAILED_PRECONDITION,
        "DAG {dag_id} is no longer defined by its file; restore it there to run it again",
    ),
    r.PAUSED: (
        Code.FAILED_PRECONDITION,
        "DAG {dag_id} is paused; `raftsched dags unpause {dag_id}` resumes it",
    ),
    r.MAX_ACTIVE_RUNS: (
        Code.FAILED_PRECONDITION,
        "DAG {dag_id} has max_active_runs runs active; wait for one to finish",
    ),
    r.RUN_EXISTS: (
        Code.ALREADY_EXISTS,
        "DAG {dag_id} already has a run with that run id or logical date; pick another",
    ),
    r.UNKNOWN_RUN: (
        Code.NOT_FOUND,
        "run {run_id} of DAG {dag_id} not found (or finished and evicted from memory);"
        " `raftsched runs list {dag_id}` shows its runs",
    ),
    r.UNKNOWN_TASK: (
        Code.NOT_FOUND,
        "task {task_id} not found in run {run_id} of DAG {dag_id};"
        " `raftsched dags show {dag_id}` lists its tasks",
    ),
    r.STALE_TOKEN: (
        Code.FAILED_PRECONDITION,
        "lease token {token} of {task_id} is stale (re-leased, expired, cleared or marked);"
        " stop this attempt",
    ),
    r.WRONG_WORKER: (
        Code.FAILED_PRECONDITION,
        "lease token {token} of {task_id} belongs to another worker; stop this attempt",
    ),
    r.INVALID: (Code.INVALID_ARGUMENT, "invalid request: {detail}"),
    r.UNKNOWN_COMMAND: (Code.UNIMPLEMENTED, "this node does not know that command; upgrade it"),
    r.INTERNAL_ERROR: (Code.INTERNAL, "internal error; the leader's log has the traceback"),
    # A stopped state machine (a bug) must not look like a stale lease: a worker keeps its
    # outcome and retries it, and a release with the fix replays the log.
    r.HALTED: (
        Code.UNAVAILABLE,
        "the cluster's state machine stopped applying (a bug; `raftsched cluster status` shows"
        " it): retry once a release with the fix runs",
    ),
}
_DEFAULT = (Code.FAILED_PRECONDITION, "refused: {reason}")


def outbox_full_message(value: Any) -> str:
    """The message of an "outbox_full" refusal: OutboxFull's, from what apply answered (the
    outbox's size, an OutboxFull, its message, (entries, cap), or nothing)."""
    if isinstance(value, OutboxFull):
        return str(value)
    if isinstance(value, str) and value:
        return value
    if type(value) is int:  # what apply answers: the outbox's size
        return str(OutboxFull(value, OUTBOX_HARD_CAP_ENTRIES))
    if isinstance(value, tuple | list) and len(value) == 2 and all(type(v) is int for v in value):
        return str(OutboxFull(int(value[0]), int(value[1])))
    if isinstance(value, dict) and {"entries", "cap"} <= value.keys():
        return str(OutboxFull(int(value["entries"]), int(value["cap"])))
    cap = OUTBOX_HARD_CAP_ENTRIES
    return str(OutboxFull(cap, cap))


REASON_CODES[OUTBOX_FULL] = (Code.RESOURCE_EXHAUSTED, outbox_full_message(None))


def reason_status(reason: str, **names: Any) -> tuple[grpc.StatusCode, str]:
    """Code and message for a refusal reason, filled with the names given (dag_id, ...)."""
    code, template = REASON_CODES.get(reason, _DEFAULT)
    values = _Names({k: v for k, v in names.items() if v not in (None, "")}, reason=reason)
    return code, template.format_map(values)


def raise_for_result(result: r.Result | r.Item, **names: Any) -> None:
    """Raise StatusError if ``result`` was refused; OK reasons ("", "unchanged") pass."""
    if result.ok or result.reason in r.OK_REASONS:
        return
    if result.reason == OUTBOX_FULL:
        raise StatusError(Code.RESOURCE_EXHAUSTED, outbox_full_message(result.value))
    if isinstance(result.value, str) and result.value:
        names.setdefault("detail", result.value)
    elif isinstance(result.value, LimitExceeded):  # the core's own bound check
        names.setdefault("detail", str(result.value))
    raise StatusError(*reason_status(result.reason, **names))


class _Names(dict[str, Any]):
    """format_map mapping that quotes strings and shows a missing name as '?'."""

    def __init__(self, values: dict[str, Any], reason: str) -> None:
        detail = values.pop("detail", reason)
        super().__init__({k: repr(v) if isinstance(v, str) else v for k, v in values.items()})
        self["reason"] = reason
        self["detail"] = detail

    def __missing__(self, key: str) -> str:
        return "?"


def abort(context: grpc.ServicerContext, err: BaseException) -> NoReturn:
    code, message = status_of(err)
    if code is Code.INTERNAL and not isinstance(err, StatusError):
        log.error("unexpected error in an API call", exc_info=err)
    context.abort(code, message)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


def translate_errors(method: F) -> F:
    """Decorate a servicer method ``(self, request, context)`` so errors become statuses."""
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def streaming(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            try:
                yield from method(self, request, context)
            except Exception as err:
                _reraise_if_aborted(context, err)
                abort(context, err)

        return streaming  # type: ignore[return-value]

    @functools.wraps(method)
    def unary(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as err:
            _reraise_if_aborted(context, err)
            abort(context, err)

    return unary  # type: ignore[return-value]


def _reraise_if_aborted(context: grpc.ServicerContext, err: Exception) -> None:
    """``context.abort`` raises a bare Exception after setting the status: let it through."""
    try:
        aborted = context.code() is not None
    except (AttributeError, NotImplementedError):
        aborted = False
    if aborted:
        raise err
