"""Outcomes of attempts that end together go to the cluster in one call (a gRPC call
costs a node more than the outcome it carries).

A gRPC call costs a scheduler node more CPU than the outcome it carries: 32 attempts that end
at once were 32 Complete calls. :class:`OutcomeBatcher` is a group commit on the worker: an
attempt thread hands its outcome over and waits for its own answer; one sender thread sends
whatever is waiting as one ``complete_many`` (WorkerService.CompleteBatch), and while that
call is in flight the next outcomes gather for the next one.

Per-lease semantics are those of ``complete``: each outcome is answered on its own (True:
applied; False: refused, the lease is no longer ours; a RaftschedError: unanswered, the
caller retries while the lease may still be ours). Each outcome's request id is derived from
its lease (worker, task, token): an attempt has one outcome, so every retry of it, batched
or not, carries the same id and the cluster applies it once.

Next leases: with ``leasing`` (the worker), a call may also ask for as many more tasks as
``leasing.slots`` allows (the slots its outcomes free) through the transport's
``complete_and_lease``: the cluster leases them in the same Raft entry, after the outcomes,
so a chain's next step comes back with its upstream's answer instead of waiting for the
worker's long poll. ``leasing.sending`` is told the call's lease request id
before it goes (the death report replays it), ``leasing.granted`` gets what it granted
(possibly nothing) before the outcomes' callers are answered.

Fallback: a transport without ``complete_many`` is called per outcome, as before; a cluster
without CompleteBatch (``complete_many`` returns None: an older release) is too, and asked
again only after :data:`RETRY_BATCH_AFTER` seconds (a rolling upgrade).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass, replace
from typing import Any, Protocol

from raftsched.core.model import TaskKey

log = logging.getLogger(__name__)

# While this many attempts run or more, the sender waits up to LINGER for the rest of a
# burst (attempts leased together end together) before it sends, or until every running
# attempt has handed its outcome over; with fewer it sends at once (a chain's next step
# waits for this outcome).
BUSY_RUNNING = 8
LINGER = 0.015
# Per call: the node's CommandBatcher puts at most 64 commands in an entry, and the call's
# own LeaseTasks (``next``) must fit in it too, after them
MAX_OUTCOMES = 63
MAX_CHARS = 512 * 1024  # text per call (messages, return values): well under gRPC's 4 MiB
RETRY_BATCH_AFTER = 60.0


@dataclass(frozen=True, slots=True)
class Report:
    """One attempt's outcome, as ``complete`` takes it."""

    key: TaskKey
    token: int
    success: bool
    exit_code: int | None
    message: str
    request_id: str
    result_json: str = ""
    follow: tuple[str, ...] | None = None
    skipped: bool = False
    outlet_extras: tuple[tuple[str, str], ...] = ()  # (asset URI, extra JSON) pairs

    def size(self) -> int:
        extras = sum(len(uri) + len(extra) for uri, extra in self.outlet_extras)
        return len(self.message) + len(self.result_json) + sum(map(len, self.follow or ())) + extras

    def fields(self) -> dict[str, Any]:
        """``complete``'s keyword arguments (the optional ones only when set)."""
        out: dict[str, Any] = {
            "success": self.success,
            "exit_code": self.exit_code,
            "message": self.message,
        }
        if self.result_json:
            out["result_json"] = self.result_json
        if self.follow is not None:
            out["follow"] = list(self.follow)
        if self.skipped:
            out["skipped"] = True
        if self.outlet_extras:
            out["outlet_extras"] = self.outlet_extras
        return out


def outcome_request_id(worker_id: str, key: TaskKey, token: int) -> str:
    """The request id of the outcome of lease (key, token): the same for every retry."""
    text = f"{worker_id}\0{key.dag_id}\0{key.run_id}\0{key.task_id}\0{token}"
    return "o-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class Leasing(Protocol):
    """What the worker tells an :class:`OutcomeBatcher` that may lease (see the module)."""

    def slots(self, outcomes: int) -> int:
        """How many more tasks a call carrying ``outcomes`` outcomes may ask for (0: none)."""
        ...

    def sending(self, request_id: str, max_tasks: int) -> None:
        """A call asking for ``max_tasks`` under ``request_id`` is about to go."""
        ...

    def granted(self, grants: list[Any], sent: float) -> None:
        """What that call granted (monotonic ``sent``: when it went), possibly nothing."""
        ...


class _Pending:
    __slots__ = ("alone", "answer", "done", "error", "on_done", "report")

    def __init__(self, report: Report) -> None:
        self.report = report
        self.done = threading.Event()
        self.answer = False
        self.error: BaseException | None = None
        self.alone = False  # send it with complete() (the cluster lacks CompleteBatch)
        self.on_done: Callable[[_Pending], None] | None = None  # submit()'s, on the sender

    def settle(self) -> None:
        self.done.set()
        if self.on_done is not None:
            try:
                self.on_done(self)
            except Exception:
                log.exception("handling the answer to an outcome failed")


class OutcomeBatcher:
    """Thread-safe. ``complete`` has the transport's ``complete`` contract."""

    def __init__(
        self,
        transport: Any,
        worker_id: str,
        running: Sized = (),
        *,
        linger: float = LINGER,
        leasing: Leasing | None = None,
    ) -> None:
        self.transport = transport
        self.worker_id = worker_id
        self.running = running  # the worker's attempts under way (their outcomes included)
        self.linger = linger
        self.leasing = leasing
        self._many = getattr(transport, "complete_many", None)
        self._and_lease = getattr(transport, "complete_and_lease", None)
        self._cond = threading.Condition()
        self._waiting: deque[_Pending] = deque()
        self._started = False
        self._unsupported_until = 0.0  # monotonic: per-outcome calls until then
        # The lease of a call that went unanswered (request id, max_tasks, when it was first
        # sent): asked again, with the same id, by the next call, so that what it may have
        # granted comes back instead of expiring (and costing each task a try)
        self._unanswered: tuple[str, int, float] | None = None
        self._sending = False  # a call is in flight (drain)
        self.calls = 0  # complete_many calls made (tests read them)

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
        outlet_extras: tuple[tuple[str, str], ...] = (),
    ) -> bool:
        report = self._report(key, token, success, exit_code, message, result_json, follow, skipped)
        if outlet_extras:
            report = replace(report, outlet_extras=tuple(outlet_extras))
        if self._direct(report):
            return self._alone(report)
        pending = self._enqueue(_Pending(report))
        pending.done.wait()  # the sender always settles it: its call has a deadline
        return self._answer(pending)

    def submit(
        self,
        key: TaskKey,
        token: int,
        answered: Callable[[bool | BaseException], None],
        *,
        success: bool,
        exit_code: int | None,
        message: str,
    ) -> None:
        """``complete`` without waiting: ``answered`` gets its answer (or the error it would
        have raised) on the sender thread, or on this one when it is sent at once. For a
        caller that must not block, such as a noop worker starting what an outcome's call
        granted on the sender thread itself."""
        report = self._report(key, token, success, exit_code, message, "", None, False)
        if self._direct(report):
            try:
                answer: bool | BaseException = self._alone(report)
            except Exception as err:
                answer = err
            answered(answer)
            return
        pending = _Pending(report)
        pending.on_done = lambda p: answered(self._answer_or_error(p))
        self._enqueue(pending)

    def _report(
        self,
        key: TaskKey,
        token: int,
        success: bool,
        exit_code: int | None,
        message: str,
        result_json: str,
        follow: Sequence[str] | None,
        skipped: bool,
    ) -> Report:
        return Report(
            key,
            token,
            success,
            exit_code,
            message,
            outcome_request_id(self.worker_id, key, token),
            result_json,
            None if follow is None else tuple(follow),
            skipped,
        )

    def _direct(self, report: Report) -> bool:
        """Whether it goes alone, by ``complete``: a transport without CompleteBatch (tests'
        fakes), a cluster without it (for a while), or too large to share a call."""
        return (
            not callable(self._many)
            or time.monotonic() < self._unsupported_until
            or report.size() > MAX_CHARS
        )

    def _enqueue(self, pending: _Pending) -> _Pending:
        with self._cond:
            self._start()
            self._waiting.append(pending)
            self._cond.notify_all()
        return pending

    def _answer(self, pending: _Pending) -> bool:
        if pending.alone:
            return self._alone(pending.report)
        if pending.error is not None:
            raise pending.error
        return pending.answer

    def _answer_or_error(self, pending: _Pending) -> bool | BaseException:
        try:
            return self._answer(pending)
        except Exception as err:
            return err

    def _alone(self, report: Report) -> bool:
        if not callable(self._many):  # a transport without request ids of ours (tests' fakes)
            return bool(self.transport.complete(report.key, report.token, **report.fields()))
        return bool(
            self.transport.complete(
                report.key, report.token, request_id=report.request_id, **report.fields()
            )
        )

    # -- the sender thread ------------------------------------------------------------------

    def _start(self) -> None:
        if not self._started:
            self._started = True
            threading.Thread(target=self._run, name="outcomes", daemon=True).start()

    def drain(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until every outcome handed over was sent and
        answered; False if some still wait."""
        end = time.monotonic() + timeout
        with self._cond:
            while self._waiting or self._sending:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        while True:
            batch = self._take()
            try:
                self._send(batch)
            except BaseException as err:  # never leave an attempt thread waiting
                for pending in batch:
                    if not pending.done.is_set():
                        pending.error = err
                        pending.settle()
            finally:
                with self._cond:
                    self._sending = False
                    self._cond.notify_all()

    def _take(self) -> list[_Pending]:
        with self._cond:
            while not self._waiting:
                self._cond.wait()
            running = len(self.running)
            if running >= BUSY_RUNNING:  # the rest of the burst, if it comes soon
                end = time.monotonic() + self.linger
                while len(self._waiting) < min(running, MAX_OUTCOMES):
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            batch: list[_Pending] = []
            size = 0
            while self._waiting and len(batch) < MAX_OUTCOMES:
                nxt = self._waiting[0].report.size()
                if batch and size + nxt > MAX_CHARS:
                    break
                batch.append(self._waiting.popleft())
                size += nxt
            self._sending = True
            return batch

    def _send(self, batch: list[_Pending]) -> None:
        self.calls += 1
        reports = [p.report for p in batch]
        more = self.leasing.slots(len(batch)) if self.leasing is not None else 0
        if callable(self._and_lease) and (more > 0 or self._unanswered is not None):
            answers = self._send_and_lease(reports, more)
        else:
            answers = self._many(reports)
        if answers is None:  # an older cluster: per outcome, for a while
            log.info("the cluster has no CompleteBatch: outcomes go one call each")
            self._unsupported_until = time.monotonic() + RETRY_BATCH_AFTER
            for pending in batch:
                pending.alone = True
                pending.settle()
            return
        if len(answers) != len(batch):
            raise RuntimeError(f"CompleteBatch answered {len(answers)} of {len(batch)} outcomes")
        for pending, answer in zip(batch, answers, strict=True):
            if isinstance(answer, BaseException):
                pending.error = answer
            else:
                pending.answer = bool(answer)
            pending.settle()

    def _send_and_lease(self, reports: list[Report], more: int) -> Any:
        assert self.leasing is not None
        if self._unanswered is not None:  # that lease again: its grants, if it committed
            request_id, more, sent = self._unanswered
        else:
            request_id, sent = uuid.uuid4().hex, time.monotonic()
        self.leasing.sending(request_id, more)
        try:
            answers, grants = self._and_lease(reports, request_id, more)
        except BaseException:
            # Unanswered: it may have committed. The death report still names it (sending),
            # and the next call asks for it again, with ``sent`` kept: every grant of it is
            # later than its first sending (the worker's fence is counted from there).
            self._unanswered = (request_id, more, sent)
            raise
        self._unanswered = None
        try:  # held before anything of them starts, and before the outcomes are answered
            self.leasing.granted(grants, sent)
        except Exception:
            log.exception("starting what an outcome's call leased failed")
        return answers
