"""The leader's materializer: committed outbox entries -> metadata DB -> AckMaterialized.

Runs in its own thread so a slow or unreachable DB never holds up scheduling (the leader
loop keeps going until back-pressure). Active only while this node leads, for the term it
started in. Each round: take ``outbox_after(watermark, batch)`` from the state, write it with
``sink.write`` (one transaction that also advances the DB watermark: exactly once, even when
an old leader writes the same entries), then propose ``AckMaterialized(watermark)`` so every
replica drops them. ``StoreUnavailable`` backs off 0.5 s -> 5 s; rounds resume when the DB
returns. It wakes on every commit that may have added entries, and at least every
``scheduler_heartbeat_sec``.

Entries the DB refuses do not stop it: the sink quarantines them and moves its watermark past
them (``store.materializer``); each round reads how many are quarantined (``quarantined``),
which ``raftsched db quarantine retry`` can lower. Any other error (``OutboxGap``, a bug)
backs off and retries the same round, and is kept in ``last_error`` until a round succeeds.

``db_watermark``, ``store_ok``, ``quarantined`` and ``last_error`` are readable from any
thread.
"""

from __future__ import annotations

import logging
import threading

from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.proposer import Proposer
from raftsched.core.commands import AckMaterialized, Command
from raftsched.core.results import Result
from raftsched.errors import RaftschedError, StoreUnavailable
from raftsched.store.abc import OutboxSink

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.5
BACKOFF_MAX = 5.0
_COALESCE = 0.005  # let a burst of commits land before writing


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
        self._idle_wait = idle_wait
        self._retention = run_retention_sec
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.db_watermark: int | None = None
        self.store_ok = True
        self.written = 0
        self.quarantined: int | None = None  # entries in the DB's quarantine, as last read
        self.last_error: str | None = None  # why the last round failed (not "DB down")
        node.add_apply_listener(self._on_apply)
        node.add_role_listener(lambda _role: self._wake.set())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="materializer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._node.remove_apply_listener(self._on_apply)

    def _on_apply(self, log_index: int, command: Command, result: Result) -> None:
        if not isinstance(command, AckMaterialized):
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._node.is_leader:
                self.last_error = None  # a follower's materializer is idle, not failing
                self._wake.wait(0.2)
                self._wake.clear()
                continue
            term = self._node.term
            try:
                self._lead(term)
            except Exception as err:
                log.exception("materializer failed; retrying")
                self.last_error = f"materializer failed: {err}"
                self._stop.wait(1.0)

    def _leading(self, term: int) -> bool:
        return not self._stop.is_set() and self._node.is_leader and self._node.term == term

    def _lead(self, term: int) -> None:
        backoff = BACKOFF_MIN
        watermark: int | None = None
        while self._leading(term):
            try:
                if watermark is None:
                    watermark = self._sink.watermark()
                    self.db_watermark = watermark
                more = self._round(watermark, term)
                watermark = self.db_watermark
                if not self.store_ok:
                    log.info("metadata DB reachable again; materializing resumes")
                self.store_ok = True
                self.last_error = None
                backoff = BACKOFF_MIN
            except StoreUnavailable as err:
                if self.store_ok:
                    log.warning("metadata DB unavailable (%s); retrying with back-off", err)
                self.store_ok = False
                watermark = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            except RaftschedError as err:  # OutboxGap, a refused ack...
                log.error("materializer: %s", err)
                self.last_error = f"materializer: {err}"
                watermark = None
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            if more:
                continue
            self._wake.wait(self._idle_wait)
            self._wake.clear()
            self._stop.wait(_COALESCE)

    def _round(self, watermark: int, term: int) -> bool:
        """One batch; True when more entries are waiting."""
        entries, last_seq, acked = self._node.read(
            lambda s: (
                list(s.outbox_after(watermark, self._batch)),
                s.outbox_last_seq,
                s.outbox_acked_seq,
            )
        )
        if entries:
            watermark = self._sink.write(entries)
            self.written += len(entries)
        self.db_watermark = watermark
        self.quarantined = self._sink.quarantined_count()
        ack = min(watermark, last_seq)
        if ack > acked and self._leading(term):
            command = self._proposer.make(
                AckMaterialized, seq=ack, finished_run_retention_seconds=self._retention
            )
            self._proposer.propose(
                command,
                deadline=self._proposer.commit_timeout,
                should_continue=lambda: self._leading(term),
            )
        return bool(entries) and watermark < last_seq
