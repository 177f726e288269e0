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
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, TypeVar

from pysyncobj import FAIL_REASON

from raftsched import clock
from raftsched.cluster import metrics
from raftsched.core.commands import Command
from raftsched.core.results import Result
from raftsched.errors import CommitTimeout, NoQuorumError, RaftschedError

log = logging.getLogger(__name__)

C = TypeVar("C", bound=Command)

_RETRYABLE = {
    FAIL_REASON.QUEUE_FULL: "queue_full",
    FAIL_REASON.MISSING_LEADER: "missing_leader",
    FAIL_REASON.DISCARDED: "discarded",
    FAIL_REASON.NOT_LEADER: "not_leader",
    FAIL_REASON.LEADER_CHANGED: "leader_changed",
    FAIL_REASON.UNKNOWN_OUTCOME: "unknown_outcome",
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
        (for :class:`Pipeline`; it may never be called, so its caller keeps a timeout)."""
        self._node.submit(command, callback)

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
        backoff = 0.02
        attempts = 0
        last = "none"
        while True:
            attempts += 1
            outcome, result = self._attempt(command, attempt_timeout)
            if outcome == FAIL_REASON.SUCCESS:
                metrics.of(self._node).commit_latency.observe(max(0.0, self._clock() - end + total))
                if attempts > 1:
                    log.debug("%s committed after %d attempts", command.request_id, attempts)
                return result  # type: ignore[no-any-return]
            if outcome == FAIL_REASON.REQUEST_DENIED:
                raise RaftschedError(f"command {command.request_id} was refused by the cluster")
            last = "timeout" if outcome == _TIMEOUT else _RETRYABLE.get(outcome, str(outcome))
            remaining = end - self._clock()
            if remaining <= 0 or (should_continue is not None and not should_continue()):
                break
            if outcome != _TIMEOUT:  # immediate failures: do not spin
                time.sleep(min(backoff, remaining))
                backoff = min(backoff * 2, 0.5)
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
    """Several proposals in flight at once, in submission order (issue #11).

    ``submit(command, on_done)`` hands the command to pysyncobj at once (it keeps submission
    order on the leader; each command has its own request id) and returns; it blocks only
    while ``max_in_flight`` commands are unconfirmed. ``on_done`` is called on the
    CALLER's thread (inside ``submit`` or ``drain``), in submission order, as
    ``on_done(result, True)`` with apply's Result, or ``on_done(None, False)`` when the command
    did not commit in time (the caller's loop stops then).

    A command whose first attempt fails or times out goes through :meth:`Proposer.propose`
    (same request id, retries until the deadline). After a command gives up, the
    pipeline submits nothing more: ``submit`` reports None at once for the rest.

    Only commands independent of each other's outcome may be in flight together (the leader
    never puts two chunks with runs of one DAG in flight at once: a later slot committed
    before an earlier one would make apply skip the earlier one).
    """

    def __init__(
        self,
        proposer: Proposer,
        *,
        max_in_flight: int,
        deadline: float | None = None,
        should_continue: Callable[[], bool] | None = None,
    ) -> None:
        self._proposer = proposer
        self._max = max(1, max_in_flight)
        self._deadline = proposer.commit_timeout if deadline is None else deadline
        self._should_continue = should_continue
        self._cond = threading.Condition()
        # [command, on_done, submitted_at, outcome, result, done]
        self._in_flight: list[list[Any]] = []
        self.failed = False
        self.submitted = 0

    def submit(self, command: Command, on_done: Callable[[Result | None, bool], None]) -> None:
        while len(self._in_flight) >= self._max:
            self._settle_oldest()
        if self.failed:
            on_done(None, False)
            return
        slot: list[Any] = [command, on_done, time.monotonic(), None, None, False]

        def callback(result: Any, error: int) -> None:
            with self._cond:
                slot[3], slot[4], slot[5] = error, result, True
                self._cond.notify_all()

        submit = getattr(self._proposer, "submit", None)
        if submit is None:  # a proposer without asynchronous submission: one at a time
            self.submitted += 1
            self._propose_now(command, on_done)
            return
        self._in_flight.append(slot)
        self.submitted += 1
        submit(command, callback)

    def drain(self) -> None:
        """Wait for every command in flight (their ``on_done`` run here)."""
        while self._in_flight:
            self._settle_oldest()

    def _settle_oldest(self) -> None:
        slot = self._in_flight[0]
        command, on_done, submitted_at = slot[0], slot[1], slot[2]
        timeout = self._proposer.commit_timeout
        with self._cond:
            while not slot[5]:
                remaining = submitted_at + timeout - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            outcome, result, done = slot[3], slot[4], slot[5]
        self._in_flight.pop(0)
        if done and outcome == FAIL_REASON.SUCCESS:
            metrics.of(getattr(self._proposer, "_node", None)).commit_latency.observe(
                max(0.0, time.monotonic() - submitted_at)
            )
            on_done(result, True)
            return
        if self.failed or (done and outcome == FAIL_REASON.REQUEST_DENIED):
            self.failed = True
            on_done(None, False)
            return
        # Unknown outcome: propose again with the same request id (apply answers a repeat
        # with the first result).
        self._propose_now(command, on_done)

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
