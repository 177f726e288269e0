"""The worker: lease, run, heartbeat, report. Holds nothing that matters (invariant 6).

- :meth:`Worker.run` long-polls for up to ``concurrency - running`` leases and starts each
  attempt on its own thread (:class:`~raftsched.worker.runner.Attempt`), its output shipped by
  a :class:`~raftsched.worker.logs.LogShipper`.
- Heartbeats and self-fencing (lease safety by construction): ``heartbeats.py``.
- An attempt that ends is reported with ``complete`` (its logs first; outcomes ending together
  share a call: ``reports.py``), retried while the lease lives; a refusal is logged, dropped.
  That call asks for as many tasks as its outcomes free slots, leased in the same Raft entry
  (a chain's next step comes back with its upstream's answer); they start as the poll's do.
- :meth:`Worker.stop` (SIGTERM): stop leasing (an outstanding long poll is cut short, see
  ``WorkerTransport.interrupt``); running attempts get ``grace_period`` to end, then are killed
  and their leases released, and :meth:`run` returns. Shutdown is bounded even when the cluster
  is gone: each call from then on gives up after ``SHUTDOWN_CALL_TIMEOUT``, an outcome is retried
  only until the grace period ends, and no thread is awaited past that.
- Death report (docs/architecture.md §11): with a transport that says how to reach the cluster
  (``last_words``), the worker arms its task supervisor, tells it each lease it holds as soon as
  the call that granted it returns (before anything of it starts) and drops it once it is over,
  and names each leasing call's request id before sending it (``death_report.py``). Should this
  process die (kill -9 included), the supervisor reports the held leases as failed once every
  process of them is gone, and hands back what the calls in flight were granted.
- ``noop``: every lease is completed at once as a success without starting a process; the
  moment it arrived is recorded (``arrivals``, and ``record`` if given) for the benchmarks.
"""

from __future__ import annotations

import collections
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from raftsched import retry
from raftsched.config import fence_margin
from raftsched.core.model import TaskKey
from raftsched.errors import RaftschedError, WorkerRejected
from raftsched.logging_setup import task_context
from raftsched.worker.callback_runner import CallbackRunner
from raftsched.worker.death_report import DeathReport
from raftsched.worker.heartbeats import (
    MAX_BEATS_IN_FLIGHT,
    SUPERVISOR_LAG,
    WATCHDOG_TICK,
    Heartbeats,
    _Running,
)
from raftsched.worker.logs import LogBuffer, LogShipper, outcome_message
from raftsched.worker.metrics import WorkerMetrics
from raftsched.worker.next_leases import NextLeases
from raftsched.worker.on_demand import channel_for
from raftsched.worker.reports import OutcomeBatcher
from raftsched.worker.runner import KILL_GRACE, Attempt, Outcome
from raftsched.worker.secret_channel import serving
from raftsched.worker.task_secrets import with_secrets
from raftsched.worker.transport import Assignment, WorkerTransport, describe

log = logging.getLogger(__name__)

__all__ = [  # the names this module held before heartbeats.py was split off (tests use some)
    "LEASE_WAIT",
    "SHUTDOWN_CALL_TIMEOUT",
    "SUPERVISOR_LAG",
    "WATCHDOG_TICK",
    "Worker",
    "WorkerSettings",
    "default_worker_id",
]

LEASE_WAIT = 5.0  # long-poll length
MAX_BACKOFF = 5.0
LOG_CLOSE_TIMEOUT = 10.0
SHUTDOWN_CALL_TIMEOUT = 2.0  # once stopping: the most any call, or the last logs, may take


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass(frozen=True)
class WorkerSettings:
    concurrency: int = 4
    lease_ttl: float = 30.0
    heartbeat_interval: float = 5.0
    grace_period: float = 30.0
    lease_wait: float = LEASE_WAIT
    kill_grace: float = KILL_GRACE  # SIGTERM -> SIGKILL on execution_timeout
    noop: bool = False


class Worker(NextLeases, DeathReport, Heartbeats):
    def __init__(
        self,
        transport: WorkerTransport,
        settings: WorkerSettings | None = None,
        *,
        worker_id: str | None = None,
        record: Callable[[Assignment, float], None] | None = None,
    ) -> None:
        self.transport = transport
        self.settings = settings or WorkerSettings()
        self.worker_id = worker_id or default_worker_id()
        self.record = record
        self.arrivals: collections.deque[tuple[Assignment, float]] = collections.deque(
            maxlen=100_000
        )
        self._running: dict[tuple[TaskKey, int], _Running] = {}  # by (key, token)
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._grace_ends = float("inf")  # monotonic; set by stop()
        ttl = self.settings.lease_ttl
        self.margin = fence_margin(ttl)
        self.window = ttl - self.margin  # an attempt unheartbeated this long is killed
        self._beats = threading.Semaphore(MAX_BEATS_IN_FLIGHT)
        self._armed = False  # the supervisor's death report (worker.death_report)
        self.metrics = WorkerMetrics()  # served by the CLI when [worker] metrics_port is set
        self.metrics.watch(self)
        # Outcomes that end together share a call, which leases their slots again:
        # one call per outcome cost the nodes more CPU than the outcomes themselves
        self.outcomes = OutcomeBatcher(transport, self.worker_id, self._running, leasing=self)
        # Callback jobs run on a thread of their own (worker.callback_runner)
        self.callbacks = CallbackRunner.for_worker(transport, self.worker_id, self.settings.noop)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        """Lease and run until :meth:`stop`; returns once every attempt is over."""
        beats = threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True)
        beats.start()
        self._arm()
        if self.callbacks is not None:
            self.callbacks.start()
        log.info("worker %s: concurrency %d", self.worker_id, self.settings.concurrency)
        failures, backoff = 0, 0.0  # failed lease calls in a row; the wait before the next
        try:
            while not self._stopping.is_set():
                free = self._wait_for_capacity()
                if free <= 0:
                    continue
                sent = time.monotonic()  # every grant of this call is later than this
                try:
                    leases = self.transport.lease(self.worker_id, free, self.settings.lease_wait)
                    failures, backoff = 0, 0.0
                except WorkerRejected:
                    raise
                except RaftschedError as err:
                    failures += 1
                    backoff = retry.backoff(failures, initial=0.5, maximum=MAX_BACKOFF)
                    log.info("no lease: %s (again in %.1fs)", err, backoff)
                    leases = []
                except Exception:
                    failures += 1
                    backoff = retry.backoff(failures, initial=0.5, maximum=MAX_BACKOFF)
                    log.exception("lease failed (again in %.1fs)", backoff)
                    leases = []
                self._hold(leases)
                self._polling("", 0)  # answered (and what it granted held): nothing to replay
                for assignment, granted in self._confirm(leases, sent):
                    self._start(assignment, granted)
                self._stopping.wait(backoff)
        finally:
            self._shutdown()
            if self.callbacks is not None:  # a callback under way gets the grace period too
                self.callbacks.finish(self._grace_ends)
            self._stopped.set()
            beats.join(SHUTDOWN_CALL_TIMEOUT)  # a daemon: a beat sent before stop() may hang

    def stop(self) -> None:
        """Stop leasing and begin the graceful shutdown. Safe from a signal handler of a thread
        that only waits (see ``WorkerTransport.interrupt``); a second call changes nothing."""
        if not self._stopping.is_set():
            self._grace_ends = time.monotonic() + self.settings.grace_period
            self._stopping.set()
        if self.callbacks is not None:
            self.callbacks.stop()
        self.transport.interrupt(SHUTDOWN_CALL_TIMEOUT)
        with self._changed:
            self._changed.notify_all()

    @property
    def running(self) -> list[TaskKey]:
        with self._changed:
            return sorted(key for key, _ in self._running)

    def _wait_for_capacity(self) -> int:
        with self._changed:
            while len(self._running) >= self.settings.concurrency:
                if self._stopping.is_set():
                    return 0
                self._changed.wait(1.0)
            return self.settings.concurrency - len(self._running)

    # -- one attempt ---------------------------------------------------------------------------
    def _start(self, a: Assignment, granted: float | None = None) -> None:
        if self._stopping.is_set():
            log.info("handing back %s: shutting down", describe(a.key))
            self._release([(a.key, a.token)])
            return
        if self.settings.noop:
            self._noop(a)
            return
        granted = time.monotonic() if granted is None else granted
        buffer = LogBuffer()
        attempt = Attempt(
            a, buffer.write, kill_grace=self.settings.kill_grace, deadline=self._deadline(granted)
        )
        shipper = LogShipper(self.transport, a.key, a.token, buffer)
        r = _Running(a, attempt, shipper, last_ok=granted)
        shipper.on_refused = lambda: self._lose(r, "log append refused")
        r.thread = threading.Thread(target=self._attempt, args=(r,), name=f"task-{a.key.task_id}")
        with self._changed:
            older = [o for (key, _), o in self._running.items() if key == a.key]
            self._running[r.lease] = r
        for o in older:  # a newer token fences it: its lease expired and came back to us
            self._lose(o, f"the task was leased again with token {a.token}")
        shipper.start()
        r.thread.start()

    def _noop(self, a: Assignment) -> None:
        arrived = time.time()
        self.arrivals.append((a, arrived))
        if self.record is not None:
            self.record(a, arrived)
        log.info(
            "noop %s try %d token %d arrived %.6f", describe(a.key), a.try_number, a.token, arrived
        )

        def answered(answer: bool | BaseException) -> None:
            if answer is not True:
                why = "the lease is no longer ours" if answer is False else answer
                log.info("noop outcome of %s not applied: %s", describe(a.key), why)

        # Not waited for: this may be the thread that sends outcomes (what its call granted)
        self.outcomes.submit(
            a.key, a.token, answered, success=True, exit_code=0, message=outcome_message("noop")
        )

    def _attempt(self, r: _Running) -> None:
        a = r.assignment
        log.info(
            "start %s try %d (%s, token %d)",
            describe(a.key),
            a.try_number,
            a.kind,
            a.token,
            extra=task_context(a.key, a.try_number),
        )
        outcome = Outcome(False, None, "the worker could not run the task")
        self.metrics.started.inc()
        try:
            try:  # the values it declared, just before it starts (worker.task_secrets)
                r.attempt.assignment = with_secrets(self.transport, self.worker_id, a)
            except RaftschedError as err:
                outcome = Outcome(False, None, f"cannot read its variables/connections: {err}")
            else:  # undeclared ones it reads on demand (worker/secret_channel.py)
                channel = channel_for(self.transport, self.worker_id, r.attempt)
                with serving(channel):
                    outcome = r.attempt.run()
        except Exception as err:
            log.exception("running %s failed", describe(a.key))
            outcome = Outcome(False, None, f"the worker could not run the task: {err}")
        finally:
            self._finish(r, outcome)

    def _finish(self, r: _Running, outcome: Outcome) -> None:
        r.ended = True
        a, took = r.assignment, time.monotonic() - r.started
        self.metrics.outcome(r, outcome)
        try:
            if r.lost:
                r.shipper.close(timeout=0)
                log.info(
                    "killed %s after %.1fs: %s (not reported)",
                    describe(a.key),
                    took,
                    outcome.message,
                )
                return
            if r.fenced or r.attempt.fenced:
                if not r.fenced:  # by its supervisor: this process could not (frozen, stuck)
                    r.fenced = self._fence_message(r, "its supervisor killed")
                    log.warning("%s was fenced: %s", describe(a.key), r.fenced)
                r.shipper.close(self._call_budget(SHUTDOWN_CALL_TIMEOUT))
                self._report(r, a, Outcome(False, outcome.exit_code, r.fenced))
                return
            r.shipper.close(self._call_budget(LOG_CLOSE_TIMEOUT))
            if outcome.killed:  # by _shutdown: the lease is still ours, hand it back
                log.info(
                    "killed %s after %.1fs: %s; handing it back",
                    describe(a.key),
                    took,
                    outcome.message,
                )
                self._release([r.lease])
                return
            verdict = "succeeded" if outcome.success else f"failed (exit {outcome.exit_code})"
            log.info(
                "%s %s after %.1fs%s",
                describe(a.key),
                verdict,
                took,
                f": {outcome.message}" if outcome.message else "",
                extra=task_context(a.key, a.try_number),
            )
            self._report(r, a, outcome)
        finally:
            self._drop([r.lease])  # over for us: no death report for it
            with self._changed:
                self._running.pop(r.lease, None)
                self._changed.notify_all()

    def _report(self, r: _Running | None, a: Assignment, outcome: Outcome) -> None:
        """complete(), retried while the lease may still be ours."""
        tries = 0
        while True:
            try:
                if outcome.defer is not None:  # its slot is free; its trigger is committed
                    accepted = self.transport.defer(a.key, a.token, outcome.defer)
                else:
                    accepted = self.outcomes.complete(
                        a.key,
                        a.token,
                        success=outcome.success,
                        exit_code=outcome.exit_code,
                        message=outcome_message(outcome.message),  # bounded and clean
                        **outcome.results(),  # its XCom, branch, skip: only when there are
                    )
            except RaftschedError as err:
                log.info("outcome of %s not reported yet: %s", describe(a.key), err)
            except Exception:
                log.exception("reporting the outcome of %s failed", describe(a.key))
            else:
                if not accepted:
                    log.info(
                        "outcome of %s refused: the lease is no longer ours; dropped",
                        describe(a.key),
                    )
                elif r is not None and r.fenced:
                    log.info("reported %s as failed: %s", describe(a.key), r.fenced)
                return
            if r is None or r.lost or time.monotonic() - r.last_ok > self.settings.lease_ttl:
                log.info("outcome of %s dropped: the lease has expired", describe(a.key))
                return
            if time.monotonic() >= self._grace_ends:
                log.info("outcome of %s dropped: the grace period is over", describe(a.key))
                return
            tries += 1
            backoff = retry.backoff(tries, initial=0.2, maximum=MAX_BACKOFF)
            time.sleep(min(backoff, max(0.0, self._grace_ends - time.monotonic())))

    def _lose(self, r: _Running, why: str) -> None:
        """The lease went elsewhere: SIGKILL the attempt now and report nothing."""
        if r.fenced:
            return  # killed already, and reported as fenced
        if not r.lost and time.monotonic() > r.last_ok + self.window:
            self._fence(r)  # its fence passed first: this is why the lease went elsewhere
            return
        if not r.lost:
            r.lost = True
            log.info("killing %s: %s", describe(r.assignment.key), why)
        r.attempt.kill(f"killed: {why}")

    def _release(self, leases: list[tuple[TaskKey, int]]) -> None:
        try:
            self.transport.release(self.worker_id, leases)
        except RaftschedError as err:
            log.info("release not confirmed (the leases will expire instead): %s", err)
        except Exception:
            log.exception("release failed (the leases will expire instead)")
        self._drop(leases)  # nothing of them runs: nothing to report should we die now

    # -- shutdown ------------------------------------------------------------------------------
    def _call_budget(self, normal: float) -> float:
        return min(normal, SHUTDOWN_CALL_TIMEOUT) if self._stopping.is_set() else normal

    def _shutdown(self) -> None:
        grace = self.settings.grace_period
        deadline = min(self._grace_ends, time.monotonic() + grace)  # stop() set it, unless
        if self.settings.noop:  # its outcomes are not waited for when sent (_noop): now they are
            self.outcomes.drain(max(0.0, deadline - time.monotonic()))
        with self._changed:  # run() ended otherwise (WorkerRejected)
            if self._running:
                log.info("stopping: waiting up to %gs for %d attempt(s)", grace, len(self._running))
            while self._running and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            leftovers = list(self._running.values())
        for r in leftovers:
            r.attempt.kill(f"killed: the worker is shutting down (grace_period of {grace:g}s)")
        # Each ends within its last logs and its release, both bounded; a complete sent before
        # stop() may still hang on its own deadline: not waited for (closing the client ends it).
        join_by = time.monotonic() + 3 * SHUTDOWN_CALL_TIMEOUT + 1.0
        for r in leftovers:
            if r.thread is not None:
                r.thread.join(max(0.0, join_by - time.monotonic()))
        log.info("worker %s stopped", self.worker_id)
