"""Heartbeats and self-fencing of a worker's attempts (:class:`Heartbeats`, mixed into
``loop.Worker``), and the record of one running attempt (:class:`_Running`).

- A heartbeat thread sends every (key, token) each ``heartbeat_interval`` (each call on a
  thread of its own, so one that hangs delays no other). A refused token (the lease expired
  and went elsewhere, invariant 2) or a refused log append kills the attempt at once, and
  nothing more is reported for it.
- Self-fencing (lease safety by construction): for each attempt the worker keeps the local
  monotonic time at which it SENT the last heartbeat the cluster accepted (or the Lease call
  that granted it). The cluster stamped the new expiry after that send, so ``sent + lease_ttl``
  is a lower bound of the expiry. The same thread, every ``WATCHDOG_TICK`` and whatever any
  call is doing, kills an attempt once ``sent + lease_ttl - margin`` has passed
  (``config.fence_margin``: max(1s, 20% of lease_ttl)), logs it at warning and reports it as
  failed (best effort: the report is refused if the lease is gone). The attempt's supervisor
  holds the same fence (``deadline``, pushed on with each accepted heartbeat, plus
  ``SUPERVISOR_LAG``) and kills the attempt itself when the worker cannot: frozen (SIGSTOP),
  swapped out or stuck. A lease whose long poll took so long that little of its TTL may be
  left is confirmed with a heartbeat before its attempt starts.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from raftsched.core.model import TaskKey
from raftsched.errors import RaftschedError, WorkerRejected
from raftsched.worker.logs import LogShipper
from raftsched.worker.metrics import WorkerMetrics
from raftsched.worker.runner import Attempt
from raftsched.worker.transport import Assignment, WorkerTransport, describe

if TYPE_CHECKING:
    from raftsched.worker.loop import WorkerSettings

log = logging.getLogger("raftsched.worker.loop")  # the worker's one logger (it was one module)

WATCHDOG_TICK = 0.1  # seconds between two checks of the attempts' fences
SUPERVISOR_LAG = 0.25  # the supervisor's fence comes this much later than the worker's own
MAX_BEATS_IN_FLIGHT = 3  # heartbeat calls under way at once (a cut-off cluster: they hang)


@dataclass(eq=False)
class _Running:
    assignment: Assignment
    attempt: Attempt
    shipper: LogShipper
    started: float = field(default_factory=time.monotonic)
    # When the call that last extended the lease (an accepted heartbeat, or the Lease that
    # granted it) was sent: the lease lives at least until last_ok + lease_ttl.
    last_ok: float = field(default_factory=time.monotonic)
    lost: bool = False  # the lease is gone: report nothing
    fenced: str = ""  # why it was killed for want of an accepted heartbeat: report a failure
    ended: bool = False  # its process is over and its outcome on the way: nothing to kill
    thread: threading.Thread | None = None

    @property
    def lease(self) -> tuple[TaskKey, int]:
        return (self.assignment.key, self.assignment.token)


class Heartbeats:
    """The heartbeat thread and the fences of ``loop.Worker``'s attempts. The attributes below
    are the Worker's (set in its ``__init__``)."""

    transport: WorkerTransport
    worker_id: str
    settings: WorkerSettings
    margin: float
    window: float
    _running: dict[tuple[TaskKey, int], _Running]
    _changed: threading.Condition
    _stopped: threading.Event
    _beats: threading.Semaphore
    metrics: WorkerMetrics

    if TYPE_CHECKING:
        # loop.Worker's
        def _lose(self, r: _Running, why: str) -> None: ...
        def _drop(self, leases: list[tuple[TaskKey, int]]) -> None: ...
        def _release(self, leases: list[tuple[TaskKey, int]]) -> None: ...

    # -- new leases ----------------------------------------------------------------------------
    def _confirm(self, leases: list[Assignment], sent: float) -> list[tuple[Assignment, float]]:
        """Each lease with when it is known to have been extended last. A long poll may have
        been granted long after it was sent: when less than two heartbeats' worth of its fence
        may be left, one heartbeat proves the lease fresh before its attempt starts."""
        if not leases or self.settings.noop or self._stopping.is_set():
            return [(a, sent) for a in leases]
        if time.monotonic() + 2 * self.settings.heartbeat_interval < sent + self.window:
            return [(a, sent) for a in leases]
        beat = time.monotonic()
        try:
            answers = self.transport.heartbeat(self.worker_id, [(a.key, a.token) for a in leases])
        except WorkerRejected:
            raise
        except Exception as err:
            log.info("new leases not confirmed: %s", err)
            answers = {}
        confirmed, unconfirmed = [], []
        for a in leases:
            ok = answers.get(a.key)
            if ok is True:
                confirmed.append((a, beat))
            elif ok is False:
                log.info("lease of %s refused before it started; dropped", describe(a.key))
                self._drop([(a.key, a.token)])
            elif time.monotonic() < sent + self.window:
                confirmed.append((a, sent))  # its fence is still ahead: the watchdog decides
            else:
                unconfirmed.append((a.key, a.token))
        if unconfirmed:
            log.info("handing back %d lease(s) that could not be confirmed", len(unconfirmed))
            self._release(unconfirmed)
        return confirmed

    # -- self-fencing --------------------------------------------------------------------------
    def _deadline(self, last_ok: float) -> float:
        """The supervisor's fence for an attempt last extended at ``last_ok``."""
        return last_ok + self.window + SUPERVISOR_LAG

    def _fence_message(self, r: _Running, who: str) -> str:
        silent = time.monotonic() - r.last_ok
        return (
            f"worker lost contact with the cluster for {silent:.1f}s; {who} its attempt before"
            f" its lease could expire (lease_ttl {self.settings.lease_ttl:g}s, margin"
            f" {self.margin:g}s)"
        )

    def _fence(self, r: _Running) -> None:
        """No heartbeat accepted for ``window``: kill the attempt before its lease can expire
        (the cluster may be about to lease it again) and report it as failed."""
        if r.lost or r.fenced:
            return
        r.fenced = self._fence_message(r, "killed")
        a = r.assignment
        log.warning(
            "fencing %s try %d (token %d): %s", describe(a.key), a.try_number, a.token, r.fenced
        )
        r.attempt.kill(r.fenced)

    def _watchdog(self) -> None:
        now = time.monotonic()
        with self._changed:
            running = [r for r in self._running.values() if not (r.lost or r.fenced)]
        for r in running:
            if now > r.last_ok + self.window:
                self._fence(r)

    def _extend(self, r: _Running, sent: float) -> None:
        if sent > r.last_ok:
            r.last_ok = sent
        if not (r.lost or r.fenced):
            r.attempt.extend(self._deadline(r.last_ok))

    # -- heartbeats ----------------------------------------------------------------------------
    def _heartbeats(self) -> None:
        """The watchdog every WATCHDOG_TICK, and a heartbeat every heartbeat_interval, each on
        a thread of its own (this one never waits for the cluster)."""
        interval = self.settings.heartbeat_interval
        next_beat = time.monotonic() + interval
        while not self._stopped.wait(min(WATCHDOG_TICK, interval)):
            self._watchdog()  # first: after a freeze, fence before any late answer arrives
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + interval
                if self._beats.acquire(blocking=False):
                    threading.Thread(target=self._beat, name="heartbeat-call", daemon=True).start()

    def _beat(self) -> None:
        try:
            self.heartbeat_once()
        finally:
            self._beats.release()

    def heartbeat_once(self) -> None:
        with self._changed:
            running = [r for r in self._running.values() if not (r.lost or r.fenced)]
        if not running:
            return
        sent = time.monotonic()
        try:
            answers = self.transport.heartbeat(self.worker_id, [r.lease for r in running])
        except RaftschedError as err:
            log.info("heartbeat not answered: %s", err)
            self.metrics.renewal_failures.labels("unanswered").inc(len(running))
            return
        except Exception:
            log.exception("heartbeat failed")
            self.metrics.renewal_failures.labels("unanswered").inc(len(running))
            return
        for r in running:
            ok = answers.get(r.assignment.key)
            if ok is True:  # only an explicit yes extends (a missing key is not a refusal)
                self.metrics.renewals.inc()
                self._extend(r, sent)
            elif ok is False and r.ended:  # most likely its own outcome ended the lease
                log.debug("%s ended; its lease is no longer held", describe(r.assignment.key))
            elif ok is False:
                self.metrics.renewal_failures.labels("refused").inc()
                self._lose(r, "the cluster refused its lease token (the lease went elsewhere)")
