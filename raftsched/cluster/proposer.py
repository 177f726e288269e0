"""Propose commands to the cluster: request ids, timeouts, retries with the same id.

Contract of :meth:`Proposer.propose`:

- Every attempt is one replicated call with a timeout (``commit_timeout``); pysyncobj can lose
  a callback, so nothing waits without one.
- After LEADER_CHANGED, DISCARDED, NOT_LEADER, MISSING_LEADER, QUEUE_FULL, UNKNOWN_OUTCOME or
  a timeout the command may or may not have been applied: it is proposed again with the SAME
  request id (the state answers a repeat with the first result, ``duplicate=True``) until it
  commits or the deadline passes.
- Out of time: :class:`~raftsched.errors.NoQuorumError` when no leader with a quorum is known,
  else :class:`~raftsched.errors.CommitTimeout` (outcome unknown; retrying is safe).
- ``REQUEST_DENIED`` (pysyncobj refused the entry) raises ``RaftschedError`` at once.
- Thread-safe: any number of threads may propose at the same time, from any node.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar

from raftsched import clock, retry
from raftsched.cluster import metrics
from raftsched.core.commands import Command
from raftsched.core.results import Result
from raftsched.errors import CommitTimeout, NoQuorumError, RaftschedError, UpgradeUnfinished
from raftsched.raft.outcomes import FailReason

log = logging.getLogger(__name__)

C = TypeVar("C", bound=Command)

_RETRYABLE = {
    FailReason.QUEUE_FULL: "queue_full",
    FailReason.MISSING_LEADER: "missing_leader",
    FailReason.DISCARDED: "discarded",
    FailReason.NOT_LEADER: "not_leader",
    FailReason.LEADER_CHANGED: "leader_changed",
    FailReason.UNKNOWN_OUTCOME: "unknown_outcome",
}
_TIMEOUT = -1


class _Submitter(Protocol):
    def submit(self, command: Command, callback: Callable[[Any, int], None]) -> None: ...

    @property
    def leader_address(self) -> str | None: ...

    @property
    def quorum(self) -> bool: ...


def new_request_id() -> str:
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return clock.now()


class Proposer:
    def __init__(
        self,
        node: _Submitter,
        *,
        commit_timeout: float,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._node = node
        self.commit_timeout = commit_timeout
        self.deadline = deadline if deadline is not None else 3 * commit_timeout
        self._clock = clock

    def make(self, cls: type[C], **fields: Any) -> C:
        """A new command of ``cls`` with a fresh request id and ``now`` = this node's clock."""
        fields.setdefault("request_id", new_request_id())
        fields.setdefault("now", utcnow())
        return cls(**fields)

    def submit(self, command: Command, callback: Callable[[Any, int], None]) -> None:
        """One attempt, asynchronously: ``callback(result, fail_reason)`` on the tick thread
        (for :class:`Pipeline`; it may never be called, so its caller keeps a timeout). A
        command the mixed-release gate refuses is REQUEST_DENIED here, as the node's own
        command gate answers (:meth:`propose` raises its UpgradeUnfinished instead)."""
        try:
            self._node.submit(command, callback)
        except UpgradeUnfinished as err:
            log.info("%s not proposed: %s", type(command).__name__, err)
            callback(None, FailReason.REQUEST_DENIED)

    def propose(
        self,
        command: Command,
        *,
        deadline: float | None = None,
        should_continue: Callable[[], bool] | None = None,
    ) -> Result:
        """Commit ``command`` and return apply's Result (see the module contract).

        ``deadline`` (seconds from now) overrides the default; ``should_continue`` is checked
        before each retry (the leader loop stops retrying once it no longer leads)."""
        total = self.deadline if deadline is None else deadline
        end = self._clock() + total
        attempt_timeout = min(self.commit_timeout, total)
        pauses = 0  # immediate failures so far: each pause doubles, 20 ms up to 0.5 s
        attempts = 0
        last = "none"
        while True:
            attempts += 1
            outcome, result = self._attempt(command, attempt_timeout)
            if outcome == FailReason.SUCCESS:
                metrics.of(self._node).commit_latency.observe(max(0.0, self._clock() - end + total))
                if attempts > 1:
                    log.debug("%s committed after %d attempts", command.request_id, attempts)
                return result  # type: ignore[no-any-return]
            if outcome == FailReason.REQUEST_DENIED:
                raise RaftschedError(f"command {command.request_id} was refused by the cluster")
            last = "timeout" if outcome == _TIMEOUT else _RETRYABLE.get(outcome, str(outcome))
            remaining = end - self._clock()
            if remaining <= 0 or (should_continue is not None and not should_continue()):
                break
            if outcome != _TIMEOUT:  # immediate failures: do not spin
                pauses += 1
                time.sleep(min(retry.backoff(pauses, initial=0.02, maximum=0.5), remaining))
            attempt_timeout = max(0.05, min(self.commit_timeout, end - self._clock()))
        log.info(
            "command %s (%s) not confirmed after %d attempts (last: %s)",
            command.request_id,
            type(command).__name__,
            attempts,
            last,
        )
        if self._node.leader_address is None or not self._node.quorum:
            raise NoQuorumError(
                f"no leader with a quorum is reachable (command {command.request_id},"
                f" {attempts} attempts in {total:.1f}s, last: {last}); check that a majority"
                " of the nodes in [cluster] nodes are running and can reach each other"
            )
        raise CommitTimeout(command.request_id, total)

    def _attempt(self, command: Command, timeout: float) -> tuple[int, Any]:
        done = threading.Event()
        box: list[Any] = [None, None]

        def callback(result: Any, error: int) -> None:
            box[0], box[1] = result, error
            done.set()

        self._node.submit(command, callback)
        if not done.wait(timeout):
            return _TIMEOUT, None
        return box[1], box[0]


class Pipeline:
    """Several proposals in flight at once, settled in submission order (a round
    trip per proposal would bound the leader's throughput).

    ``submit(command, on_done)`` hands the command to pysyncobj at once (it keeps submission
    order on the leader; each command has its own request id) and returns; it blocks only
    while ``max_in_flight`` commands are unconfirmed (it then settles the oldest).
    ``on_done`` is called on the CALLER's thread (inside ``submit``, ``poll`` or ``drain``), in
    submission order, as ``on_done(result, True)`` with apply's Result, or
    ``on_done(None, False)`` when the command did not commit in time.

    ``poll()`` settles, without waiting, every command at the head whose outcome is known;
    ``on_callback`` (if given) is called on pysyncobj's tick thread whenever an outcome
    arrives, so an owner that does not block in ``submit`` knows when to ``poll``.

    A command whose attempt fails or times out is retried ONCE, with the same request id,
    before anything submitted after it is settled (apply answers a repeat with the first
    result). If that retry fails too, the pipeline is ``failed``: the commands after it still
    settle with their own outcome (they may have committed; none is retried), ``submit``
    reports ``on_done(None, False)`` at once, and the owner may :meth:`reset` it once nothing
    is in flight. ``REQUEST_DENIED`` fails it at once.

    Only commands independent of each other's outcome may be in flight together (the leader
    never puts two entries with runs of one DAG in flight at once: a later slot committed
    before an earlier one would make apply skip the earlier one).
    """

    def __init__(
        self,
        proposer: Proposer,
        *,
        max_in_flight: int,
        deadline: float | None = None,
        should_continue: Callable[[], bool] | None = None,
        on_callback: Callable[[], None] | None = None,
    ) -> None:
        self._proposer = proposer
        self._max = max(1, max_in_flight)
        self._deadline = proposer.commit_timeout if deadline is None else deadline
        self._should_continue = should_continue
        self._on_callback = on_callback
        self._cond = threading.Condition()
        self._in_flight: deque[_Slot] = deque()
        self.failed = False
        self.submitted = 0
        self.retried = 0

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def submit(self, command: Command, on_done: Callable[[Result | None, bool], None]) -> None:
        while len(self._in_flight) >= self._max:
            self._settle_oldest(wait=True)
        if self.failed:
            on_done(None, False)
            return
        if getattr(self._proposer, "submit", None) is None:
            # a proposer without asynchronous submission: one at a time
            self.submitted += 1
            self._propose_now(command, on_done)
            return
        slot = _Slot(command, on_done)
        self._in_flight.append(slot)
        self.submitted += 1
        self._send(slot)

    def poll(self) -> None:
        """Settle, in order, the commands at the head whose outcome is known (no waiting for
        one in flight; a failed one is retried here, which does wait)."""
        while self._in_flight and (self._in_flight[0].done or self._in_flight[0].expired()):
            self._settle_oldest(wait=False)

    def drain(self) -> None:
        """Wait for every command in flight (their ``on_done`` run here)."""
        while self._in_flight:
            self._settle_oldest(wait=True)

    def abandon(self) -> list[Command]:
        """Forget the commands in flight without calling their ``on_done`` (the end of a term:
        what committed is in the state, which the next leader reads); return them."""
        dropped = [slot.command for slot in self._in_flight]
        self._in_flight.clear()
        return dropped

    def reset(self) -> None:
        """Accept commands again after a failure (only once nothing is in flight)."""
        if not self._in_flight:
            self.failed = False

    # -- internals ---------------------------------------------------------------------------

    def _send(self, slot: _Slot) -> None:
        slot.outcome, slot.result, slot.done = None, None, False
        slot.submitted_at = time.monotonic()
        slot.timeout = self._proposer.commit_timeout
        attempt = slot.attempts = slot.attempts + 1

        def callback(result: Any, error: int) -> None:
            with self._cond:
                if slot.attempts != attempt and error != FailReason.SUCCESS:
                    return  # a late failure of an attempt already given up (a success counts)
                slot.outcome, slot.result, slot.done = error, result, True
                self._cond.notify_all()
            if self._on_callback is not None:
                self._on_callback()

        self._proposer.submit(slot.command, callback)

    def _wait(self, slot: _Slot) -> None:
        """Until ``slot`` has an outcome, its attempt times out, or ``should_continue`` says
        stop (a leader that lost its term does not sit out the commit timeout)."""
        while True:
            with self._cond:  # never held while calling should_continue (it may take locks)
                remaining = slot.submitted_at + slot.timeout - time.monotonic()
                if slot.done or remaining <= 0:
                    return
                self._cond.wait(min(remaining, _LOOK_AGAIN))
                if slot.done:
                    return
            if self._should_continue is not None and not self._should_continue():
                return

    def _settle_oldest(self, *, wait: bool) -> None:
        slot = self._in_flight[0]
        if wait or not slot.done:
            self._wait(slot)
        if not wait and not slot.done and not slot.expired():
            return  # poll only: not known yet (a wait that ended early: no longer leading)
        if not self._succeeded(slot) and not self.failed and slot.outcome != REQUEST_DENIED:
            # Unknown outcome: the same request id once more, before anything after it is
            # settled (apply answers a repeat with the first result).
            if slot.outcome is not None and slot.outcome != _TIMEOUT:
                time.sleep(_RETRY_PAUSE)  # an immediate refusal (queue full): do not spin
            if self._should_continue is None or self._should_continue():
                self.retried += 1
                self._send(slot)
                self._wait(slot)
        self._in_flight.popleft()
        if self._succeeded(slot):
            metrics.of(getattr(self._proposer, "_node", None)).commit_latency.observe(
                max(0.0, time.monotonic() - slot.submitted_at)
            )
            slot.on_done(slot.result, True)
            return
        if not self.failed:
            log.info(
                "pipelined %s %s not committed (last: %s); submitting nothing more",
                type(slot.command).__name__,
                slot.command.request_id,
                "timeout" if not slot.done else _RETRYABLE.get(slot.outcome, str(slot.outcome)),
            )
        self.failed = True
        slot.on_done(None, False)

    @staticmethod
    def _succeeded(slot: _Slot) -> bool:
        return slot.done and slot.outcome == FailReason.SUCCESS

    def _propose_now(self, command: Command, on_done: Callable[[Any, bool], None]) -> None:
        """Propose and wait (with retries); a command that cannot be committed stops the
        pipeline: nothing after it may go out."""
        try:
            result = self._proposer.propose(
                command, deadline=self._deadline, should_continue=self._should_continue
            )
        except RaftschedError as err:
            log.info("pipelined %s not committed: %s", type(command).__name__, err)
            self.failed = True
            on_done(None, False)
            return
        on_done(result, True)


REQUEST_DENIED = FailReason.REQUEST_DENIED
_RETRY_PAUSE = 0.05  # seconds before retrying a command pysyncobj refused at once
_LOOK_AGAIN = 0.1  # seconds between two looks at should_continue while waiting for a commit


class _Slot:
    """One command in a :class:`Pipeline`: its current attempt and what came of it."""

    __slots__ = (
        "attempts",
        "command",
        "done",
        "on_done",
        "outcome",
        "result",
        "submitted_at",
        "timeout",
    )

    def __init__(self, command: Command, on_done: Callable[[Result | None, bool], None]) -> None:
        self.command = command
        self.on_done = on_done
        self.attempts = 0
        self.submitted_at = 0.0
        self.timeout = 0.0
        self.outcome: int | None = None
        self.result: Any = None
        self.done = False

    def expired(self) -> bool:
        return not self.done and time.monotonic() >= self.submitted_at + self.timeout
