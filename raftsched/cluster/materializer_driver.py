"""The leader's materializer: committed outbox entries -> metadata DB -> AckMaterialized.

Runs in its own thread so a slow or unreachable DB never holds up scheduling (the leader
loop keeps going until back-pressure). Active only while this node leads, for the term it
started in. Each round: take ``outbox_after(watermark, batch)`` from the state, write it with
``sink.write`` (one transaction that also advances the DB watermark: exactly once, even when
an old leader writes the same entries), then propose ``AckMaterialized(watermark)`` so every
replica drops them; the ack commits while the next batch is written, and while the DB is
behind each batch doubles, up to ``BATCH_GROWTH`` times ``batch``. ``StoreUnavailable``
backs off 0.5 s -> 5 s; rounds resume when the DB returns. It wakes on every commit that may
have added entries, and at least every ``scheduler_heartbeat_sec``.

Entries the DB refuses do not stop it: the sink quarantines them and moves its watermark past
them (``store.materializer``); each round reads how many are quarantined (``quarantined``),
which ``raftsched db quarantine retry`` can lower. Any other error (``OutboxGap``, a bug)
backs off and retries the same round, and is kept in ``last_error`` until a round succeeds.

DB and log must agree (docs/architecture.md §5). On becoming leader, after a barrier commit (so
the state holds everything committed before this term), the driver compares the DB watermark
``W`` with the state's outbox: ``W > last_seq`` means the journals are behind the DB (lost,
or older than the DB): writing would skip the new history's entries up to ``W``; ``W <
acked_seq`` means the DB lost entries the cluster already dropped as written (a restore,
SQLite ``synchronous=NORMAL`` after a crash). Either way ``mismatch`` says what is wrong and
which command repairs it (``cluster status`` shows it as the node's error, and it is logged),
nothing is written or acknowledged, and ``refuses(command)`` (the node's command gate and the
leader loop's hold) stops new runs, queueing and leases. The check repeats every few seconds
and clears itself once the two agree (e.g. the DB was restored). Until the first check of a
term succeeded (the DB may be down) ``hold_reason()`` also holds the leader loop when the log
has never been materialized (acked seq 0: it may be a new log beside an old DB); an
established log keeps scheduling through a DB outage, up to back-pressure. An entry is
acknowledged only once the DB's watermark covers it (never ``min(watermark, last_seq)``).

``db_watermark``, ``store_ok``, ``quarantined``, ``mismatch`` and ``last_error`` are readable
from any thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from raftsched import retry
from raftsched.cluster import metrics
from raftsched.cluster.leading import LeadingThread
from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.proposer import Pipeline, Proposer
from raftsched.core.commands import (
    AckMaterialized,
    Batch,
    Command,
    CreateRuns,
    LeaseTasks,
    QueueTasks,
)
from raftsched.core.results import Result
from raftsched.errors import LogDbMismatch, RaftschedError, StoreUnavailable
from raftsched.store.abc import OutboxSink

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.5
BACKOFF_MAX = 5.0
_COALESCE = 0.005  # let a burst of commits land before writing
RECHECK = 5.0  # seconds between checks while the DB and the log disagree
# Rounds that follow each other closely (a chain of tasks: one small round per step) do
# not each pay a DB query for the quarantine count and a Raft entry for their ack:
# the count is read at most every QUARANTINE_READ_INTERVAL seconds and a caught-up round's ack
# goes at most every ACK_INTERVAL seconds; what is put off is done by a round at that time
# (the driver wakes for it), so the status and the outbox are never staler than that.
QUARANTINE_READ_INTERVAL = 1.0
ACK_INTERVAL = 0.1
# A caught-up driver starts its next round no sooner than this after the last one began: a
# trickle of commits (chains of tasks) is written a few at a time, not one transaction per
# commit (4 chains: about a quarter of the leader's Python CPU was these small transactions).
# A backlog is written round after round, without this pause.
MIN_ROUND_INTERVAL = 0.05
# While the DB is behind, each batch is twice the one before, up to this many times the
# configured ``materialize_batch``: per entry, a 2,000-entry transaction costs the
# leader ~23% less CPU and PostgreSQL ~18% less than a 500-entry one (fewer round trips,
# commits and statement set-ups). Back to the configured size once caught up, so a quiet
# cluster writes small, prompt batches.
BATCH_GROWTH = 8
REBUILD_HINT = (
    "stop every node and run `raftsched cluster rebuild --from-db` (the DB's history becomes"
    " the cluster's state), then start the nodes again"
)
_SCHEDULING = (CreateRuns, LeaseTasks, QueueTasks)


def mismatch_reason(watermark: int, last_seq: int, acked_seq: int) -> str | None:
    """Why the DB watermark and the state's outbox cannot both be right, or None."""
    if watermark > last_seq:
        return (
            f"the metadata DB holds outbox entries up to seq {watermark} but the Raft log's"
            f" state ends at seq {last_seq}: the journals are behind the DB (lost, or older"
            " than the DB). Not materializing or scheduling (runs that already ran would be"
            f" created again); to repair: {REBUILD_HINT}"
        )
    if watermark < acked_seq:
        return (
            f"the metadata DB's watermark is {watermark} but the cluster already acknowledged"
            f" outbox entries up to seq {acked_seq} as written: the DB lost committed writes"
            " (restored from a backup, or SQLite synchronous=NORMAL after a crash). Not"
            " materializing or scheduling; to repair: restore the DB to a copy whose"
            f" watermark is at least {acked_seq}, or {REBUILD_HINT} (the lost entries stay"
            " lost)"
        )
    return None


class MaterializerDriver:
    def __init__(
        self,
        node: SchedulerNode,
        proposer: Proposer,
        sink: OutboxSink,
        *,
        batch: int = 500,
        idle_wait: float = 5.0,
        run_retention_sec: float = 600.0,
    ) -> None:
        self._node = node
        self._proposer = proposer
        self._sink = sink
        self._batch = batch
        self._batch_now = batch  # grows while behind (BATCH_GROWTH)
        self._idle_wait = idle_wait
        self._retention = run_retention_sec
        self._runner = LeadingThread(
            node,
            self._lead,
            name="materializer",
            retry_after=1.0,
            failed=self._failed,
            idle=self._idle,
        )
        self._wake = self._runner.wake
        self._stop = self._runner.stopping
        self.db_watermark: int | None = None
        self.store_ok = True
        self.written = 0
        self.quarantined: int | None = None  # entries in the DB's quarantine, as last read
        self.last_error: str | None = None  # why the last round failed (not "DB down")
        self.mismatch: str | None = None  # the DB and the log disagree (see module doc)
        self._checked_term: int | None = None  # term whose DB/log check passed
        self.on_checked: Callable[[], None] | None = None  # wakes the leader loop
        self._acks: Pipeline | None = None  # the ack in flight (materializer thread only)
        self._acks_term: int | None = None
        self._ack_sent = 0  # highest seq whose ack was submitted this term
        self._ack_error: str | None = None
        self._quarantine_read_at = 0.0
        self._round_at = 0.0  # monotonic: when the last round began
        self._count_stale = True  # entries were written since the count was read
        self._ack_at = 0.0  # monotonic: when the last ack was submitted
        self._owed_at: float | None = None  # monotonic: a round is owed then (see ACK_INTERVAL)
        node.add_apply_listener(self._on_apply)
        node.add_role_listener(lambda _role: self._wake.set())

    def start(self) -> None:
        self._runner.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._runner.stop(timeout)
        self._node.remove_apply_listener(self._on_apply)

    def _on_apply(self, log_index: int, command: Command, result: Result) -> None:
        if not isinstance(command, AckMaterialized):
            self._wake.set()

    # -- on self._runner's thread (``leading.LeadingThread``) ---------------------------------

    def _idle(self) -> None:
        self.last_error = None  # a follower's materializer is idle, not failing
        self.mismatch = None
        self._checked_term = None

    def _failed(self, err: Exception) -> None:
        log.exception("materializer failed; retrying")
        self.last_error = f"materializer failed: {err}"

    def _leading(self, term: int) -> bool:
        return self._runner.leading(term)

    # -- the DB/log agreement ----------------------------------------------------------------

    def hold_reason(self) -> str | None:
        """Why the leader loop must not create runs, queue or expire now (None: go on)."""
        if self.mismatch is not None:
            return self.mismatch
        # Only a log that has never been materialized waits for the comparison: it may be a new
        # log beside an old DB (journals wiped). An established log keeps scheduling while the
        # DB is down, as back-pressure allows: a DB outage must not stop work.
        unchecked = self._checked_term is None or self._checked_term != self._node.term
        if unchecked and self._node.read(lambda s: s.outbox_acked_seq) == 0:
            return "waiting to compare the metadata DB's watermark with the Raft log"
        return None

    def refuses(self, command: Command) -> str | None:
        """The node's command gate: new runs, queueing and leases while the DB and the log
        disagree."""
        if self.mismatch is None or command is None:  # None: "do you refuse anything?"
            return self.mismatch
        if isinstance(command, _SCHEDULING) or (
            isinstance(command, Batch) and any(isinstance(c, _SCHEDULING) for c in command.commands)
        ):
            return self.mismatch
        return None

    def _check(self, term: int) -> int:
        """Read the DB watermark and return it; raise LogDbMismatch unless it agrees with the
        committed state."""
        if self._checked_term != term:
            barrier = self._proposer.make(Batch, commands=())
            self._proposer.propose(
                barrier,
                deadline=self._proposer.commit_timeout,
                should_continue=lambda: self._leading(term),
            )
        # The watermark is read after the barrier: an ack the deposed leader proposed after its
        # DB write may commit only with the barrier, and a watermark read before it would then
        # look "behind the acks" (a false alarm seen under election storms).
        watermark = self._sink.watermark()
        self.db_watermark = watermark
        last_seq, acked = self._node.read(lambda s: (s.outbox_last_seq, s.outbox_acked_seq))
        reason = mismatch_reason(watermark, last_seq, acked)
        if reason is not None:
            if reason != self.mismatch:
                log.critical("%s", reason)
            self.mismatch = reason
            raise LogDbMismatch(reason)
        if self.mismatch is not None:
            log.warning("the metadata DB and the Raft log agree again; materializing resumes")
        self.mismatch = None
        self._checked_term = term
        if self.on_checked is not None:
            self.on_checked()
        return watermark

    def _lead(self, term: int) -> None:
        self._acks, self._ack_sent, self._ack_error = None, 0, None
        try:
            self._lead_rounds(term)
        finally:
            try:  # the ack in flight ends with this term (its outcome no longer matters)
                if self._acks is not None:
                    self._acks.drain()
            except Exception:
                log.debug("ack in flight at the end of the term", exc_info=True)
            self._acks = None

    def _lead_rounds(self, term: int) -> None:
        failures = 0  # rounds failed in a row: the wait doubles, BACKOFF_MIN up to BACKOFF_MAX
        watermark: int | None = None
        while self._leading(term):
            try:
                if watermark is None:
                    watermark = self._check(term)
                more = self._round(watermark, term)
                watermark = self.db_watermark
                if not self.store_ok:
                    log.info("metadata DB reachable again; materializing resumes")
                self.store_ok = True
                self.last_error = None
                failures = 0
            except StoreUnavailable as err:
                if self.store_ok:
                    log.warning("metadata DB unavailable (%s); retrying with back-off", err)
                self.store_ok = False
                watermark = None
                self._batch_now = self._batch
                failures += 1
                self._stop.wait(self._backoff(failures))
                continue
            except LogDbMismatch:
                watermark = None
                self._stop.wait(RECHECK)
                continue
            except RaftschedError as err:  # OutboxGap, a refused ack...
                log.error("materializer: %s", err)
                self.last_error = f"materializer: {err}"
                watermark = None
                self._batch_now = self._batch
                failures += 1
                self._stop.wait(self._backoff(failures))
                continue
            if more:
                continue
            wait = self._idle_wait
            if self._owed_at is not None:
                wait = min(wait, max(0.0, self._owed_at - time.monotonic()))
            self._wake.wait(wait)
            self._wake.clear()
            since = time.monotonic() - self._round_at
            self._stop.wait(max(_COALESCE, MIN_ROUND_INTERVAL - since))

    @staticmethod
    def _backoff(failures: int) -> float:
        return retry.backoff(failures, initial=BACKOFF_MIN, maximum=BACKOFF_MAX)

    def _round(self, watermark: int, term: int) -> bool:
        """One batch; True when more entries are waiting."""
        self._round_at = time.monotonic()
        size = self._batch_now
        entries, last_seq, acked = self._node.read(
            lambda s: (
                list(s.outbox_after(watermark, size)),
                s.outbox_last_seq,
                s.outbox_acked_seq,
            )
        )
        reason = mismatch_reason(watermark, last_seq, acked)
        if reason is not None:  # never acknowledge what was not written
            self.mismatch = reason
            log.critical("%s", reason)
            raise LogDbMismatch(reason)
        if entries:
            started = time.perf_counter()
            watermark = self._sink.write(entries)
            metrics.of(self._node).db_write_latency.observe(time.perf_counter() - started)
            self.written += len(entries)
        self.db_watermark = watermark
        more = bool(entries) and watermark < last_seq
        self._batch_now = min(2 * size, self._batch * BATCH_GROWTH) if more else self._batch
        now = time.monotonic()
        self._owed_at = None
        self._count_stale = self._count_stale or bool(entries)  # they may have added to it
        if now - self._quarantine_read_at >= QUARANTINE_READ_INTERVAL:
            self.quarantined = self._sink.quarantined_count()
            self._quarantine_read_at = now
            self._count_stale = False
        elif self._count_stale:
            self._owe(self._quarantine_read_at + QUARANTINE_READ_INTERVAL)
        # The check above held before the write: the DB's entries up to the watermark are this
        # history's. A watermark now past last_seq means an old leader wrote further in the
        # same history meanwhile; ours up to last_seq are in the DB either way.
        ack = min(watermark, last_seq)
        if (
            ack > max(acked, self._ack_sent)
            and not more
            and now - self._ack_at < ACK_INTERVAL
            and self._leading(term)
        ):
            self._owe(self._ack_at + ACK_INTERVAL)
        elif ack > max(acked, self._ack_sent) and self._leading(term):
            self._ack_at = now
            command = self._proposer.make(
                AckMaterialized, seq=ack, finished_run_retention_seconds=self._retention
            )
            # Overlap (the next batch need not wait for the ack's round trip): the ack commits
            # while the next batch is read and written;
            # the ack before it is confirmed first (submit waits for it), so at most one is in
            # flight and a failed one surfaces here as an error, as before.
            self._ack_pipeline(term).submit(command, self._ack_done)
            self._ack_sent = ack
        if self._ack_error is not None:
            error, self._ack_error = self._ack_error, None
            raise RaftschedError(error)
        if not more:
            self._settle_ack()
        return more

    def _owe(self, at: float) -> None:
        self._owed_at = at if self._owed_at is None else min(self._owed_at, at)

    def _ack_pipeline(self, term: int) -> Pipeline:
        if self._acks is None or self._acks_term != term:
            self._acks = Pipeline(
                self._proposer,
                max_in_flight=1,
                deadline=self._proposer.commit_timeout,
                should_continue=lambda: self._leading(term),
            )
            self._acks_term = term
        return self._acks

    def _ack_done(self, _result: Result | None, committed: bool) -> None:
        if not committed:
            self._ack_error = "an AckMaterialized was not confirmed in time; retrying"
            self._ack_sent = 0
            self._acks = None  # a fresh pipeline: a failed one submits nothing more

    def _settle_ack(self) -> None:
        """Wait for the ack in flight (end of a burst, end of a term)."""
        if self._acks is not None:
            self._acks.drain()
        if self._ack_error is not None:
            error, self._ack_error = self._ack_error, None
            raise RaftschedError(error)
