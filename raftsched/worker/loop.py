"""The worker: lease, run, heartbeat, report. Holds nothing that matters (invariant 6).

- :meth:`Worker.run` long-polls for up to ``concurrency - running`` leases and starts each
  attempt on its own thread (:class:`~raftsched.worker.runner.Attempt`), its output shipped by
  a :class:`~raftsched.worker.logs.LogShipper`.
- A heartbeat thread sends every (key, token) each ``heartbeat_interval``. A refused token
  (the lease expired and went elsewhere, invariant 2) or a refused log append kills the
  attempt at once, and nothing more is reported for it. So does ``lease_ttl`` without one
  accepted heartbeat: by then the cluster has expired the lease.
- An attempt that ends is reported with ``complete`` (its logs are shipped first), retried
  while the lease lives; a refused ``complete`` is logged at info and dropped.
- :meth:`Worker.stop` (SIGTERM): stop leasing (an outstanding long poll is cut short, see
  ``WorkerTransport.interrupt``); running attempts get ``grace_period`` to end, then are
  killed and their leases released, and :meth:`run` returns. Shutdown is bounded even when the
  cluster is gone: each call from then on gives up after ``SHUTDOWN_CALL_TIMEOUT``, an
  outcome is retried only until the grace period ends, and no thread is awaited past that.
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
from dataclasses import dataclass, field

from raftsched.core.model import TaskKey
from raftsched.errors import RaftschedError
from raftsched.worker.logs import LogBuffer, LogShipper, outcome_message
from raftsched.worker.runner import KILL_GRACE, Attempt, Outcome
from raftsched.worker.transport import Assignment, WorkerRejected, WorkerTransport, describe

log = logging.getLogger(__name__)

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


@dataclass(eq=False)
class _Running:
    assignment: Assignment
    attempt: Attempt
    shipper: LogShipper
    started: float = field(default_factory=time.monotonic)
    last_ok: float = field(default_factory=time.monotonic)  # when the lease was last extended
    lost: bool = False  # the lease is gone: report nothing
    thread: threading.Thread | None = None

    @property
    def lease(self) -> tuple[TaskKey, int]:
        return (self.assignment.key, self.assignment.token)


class Worker:
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

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        """Lease and run until :meth:`stop`; returns once every attempt is over."""
        beats = threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True)
        beats.start()
        log.info("worker %s: concurrency %d", self.worker_id, self.settings.concurrency)
        backoff = 0.0
        try:
            while not self._stopping.is_set():
                free = self._wait_for_capacity()
                if free <= 0:
                    continue
                try:
                    leases = self.transport.lease(self.worker_id, free, self.settings.lease_wait)
                    backoff = 0.0
                except WorkerRejected:
                    raise
                except RaftschedError as err:
                    backoff = min(MAX_BACKOFF, backoff * 2 or 0.5)
                    log.info("no lease: %s (again in %.1fs)", err, backoff)
                    leases = []
                except Exception:
                    backoff = min(MAX_BACKOFF, backoff * 2 or 0.5)
                    log.exception("lease failed (again in %.1fs)", backoff)
                    leases = []
                for assignment in leases:
                    self._start(assignment)
                self._stopping.wait(backoff)
        finally:
            self._shutdown()
            self._stopped.set()
            beats.join(SHUTDOWN_CALL_TIMEOUT)  # a daemon: a beat sent before stop() may hang

    def stop(self) -> None:
        """Stop leasing and begin the graceful shutdown. Safe from a signal handler of a thread
        that only waits (see ``WorkerTransport.interrupt``); a second call changes nothing."""
        if not self._stopping.is_set():
            self._grace_ends = time.monotonic() + self.settings.grace_period
            self._stopping.set()
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
    def _start(self, a: Assignment) -> None:
        if self._stopping.is_set():
            log.info("handing back %s: shutting down", describe(a.key))
            self._release([(a.key, a.token)])
            return
        if self.settings.noop:
            self._noop(a)
            return
        buffer = LogBuffer()
        attempt = Attempt(a, buffer.write, kill_grace=self.settings.kill_grace)
        shipper = LogShipper(self.transport, a.key, a.token, buffer)
        r = _Running(a, attempt, shipper)
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
        self._report(None, a, Outcome(True, 0, "noop"))

    def _attempt(self, r: _Running) -> None:
        a = r.assignment
        log.info("start %s try %d (%s, token %d)", describe(a.key), a.try_number, a.kind, a.token)
        outcome = Outcome(False, None, "the worker could not run the task")
        try:
            outcome = r.attempt.run()
        except Exception as err:
            log.exception("running %s failed", describe(a.key))
            outcome = Outcome(False, None, f"the worker could not run the task: {err}")
        finally:
            self._finish(r, outcome)

    def _finish(self, r: _Running, outcome: Outcome) -> None:
        a, took = r.assignment, time.monotonic() - r.started
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
            )
            self._report(r, a, outcome)
        finally:
            with self._changed:
                self._running.pop(r.lease, None)
                self._changed.notify_all()

    def _report(self, r: _Running | None, a: Assignment, outcome: Outcome) -> None:
        """complete(), retried while the lease may still be ours."""
        backoff = 0.2
        while True:
            try:
                accepted = self.transport.complete(
                    a.key,
                    a.token,
                    success=outcome.success,
                    exit_code=outcome.exit_code,
                    message=outcome_message(outcome.message),  # bounded and clean
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
                return
            if r is None or r.lost or time.monotonic() - r.last_ok > self.settings.lease_ttl:
                log.info("outcome of %s dropped: the lease has expired", describe(a.key))
                return
            if time.monotonic() >= self._grace_ends:
                log.info("outcome of %s dropped: the grace period is over", describe(a.key))
                return
            time.sleep(min(backoff, max(0.0, self._grace_ends - time.monotonic())))
            backoff = min(MAX_BACKOFF, backoff * 2)

    def _lose(self, r: _Running, why: str) -> None:
        """The lease went elsewhere: SIGKILL the attempt now and report nothing."""
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

    # -- heartbeats ----------------------------------------------------------------------------
    def _heartbeats(self) -> None:
        while not self._stopped.wait(self.settings.heartbeat_interval):
            self.heartbeat_once()

    def heartbeat_once(self) -> None:
        with self._changed:
            running = [r for r in self._running.values() if not r.lost]
        if not running:
            return
        sent = time.monotonic()
        try:
            answers = self.transport.heartbeat(self.worker_id, [r.lease for r in running])
        except RaftschedError as err:
            log.info("heartbeat not answered: %s", err)
            answers = None
        except Exception:
            log.exception("heartbeat failed")
            answers = None
        for r in running:
            if answers is None:
                pass
            elif answers.get(r.assignment.key, True):
                r.last_ok = sent
            else:
                self._lose(r, "the cluster refused its lease token (the lease went elsewhere)")
                continue
            if sent - r.last_ok > self.settings.lease_ttl:
                self._lose(r, f"no heartbeat accepted for lease_ttl ({self.settings.lease_ttl:g}s)")

    # -- shutdown ------------------------------------------------------------------------------
    def _call_budget(self, normal: float) -> float:
        return min(normal, SHUTDOWN_CALL_TIMEOUT) if self._stopping.is_set() else normal

    def _shutdown(self) -> None:
        grace = self.settings.grace_period
        deadline = min(self._grace_ends, time.monotonic() + grace)  # stop() set it, unless
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
