"""The leader loop: while this node leads, turn time and DAG files into committed decisions.

Runs in its own thread (``leading.LeadingThread``); it acts only while ``node.is_leader``
holds for the term it started in, and checks that between steps. Leadership alone never
causes a side effect: every decision is a command, and only what commits counts (a minority
leader's proposals do not commit; apply refuses a stale one).

On winning an election: commit a barrier (an empty Batch) so the state includes everything
committed before this term, rebuild the DueIndex from the state, start the DAG parse thread.
Each tick: ``leader_tick.py``; the commands it builds: ``leader_commands.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from raftsched.clock import now as clock_now
from raftsched.cluster.leader_commands import (
    DAGS_PER_ENTRY,
    RUNS_PER_COMMAND,
    InFlightDecisions,
    _dag_changes,
    _queue_command,
    _run_chunks,
    _touched_dags,
)
from raftsched.cluster.leader_tick import PIPELINE_DEPTH, LeaderTick
from raftsched.cluster.leading import LeadingThread
from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.parsing import ParseThread
from raftsched.cluster.proposer import Proposer
from raftsched.cluster.tick_watch import TickCpu, TickWatch
from raftsched.cluster.versions import Finalizer
from raftsched.core import results as r
from raftsched.core.commands import Batch, Command
from raftsched.core.due import DueIndex
from raftsched.core.run_terms import SINCE_RELEASE as TERMS_SINCE
from raftsched.core.skip_causes import Gap, leader_gap
from raftsched.errors import RaftschedError

log = logging.getLogger(__name__)

# the names this module held before leader_tick.py and leader_commands.py were split off
__all__ = [
    "DAGS_PER_ENTRY",
    "PIPELINE_DEPTH",
    "RUNS_PER_COMMAND",
    "LeaderLoop",
    "LoopSettings",
    "_dag_changes",
    "_queue_command",
    "_run_chunks",
    "_touched_dags",
]

_MIN_TICK_GAP = 0.01  # coalesce bursts of commits into one tick
PARSE_SETTLE = 5.0  # seconds a term that inherited DAGs waits before its first parse


@dataclass(frozen=True)
class LoopSettings:
    dags_folder: Path
    dag_file_timeout: float = 30.0
    dag_file_output_limit: int = 1 << 20
    min_file_process_interval: float = 30.0
    scheduler_heartbeat_sec: float = 5.0
    max_outbox: int = 50000
    max_runs_per_tick: int = 500
    run_retention_sec: float = 600.0
    catchup_by_default: bool = False  # [scheduler]: a DAG without catchup= gets this
    dags_are_paused_at_creation: bool = False  # [scheduler]: a new DAG starts paused
    parse: bool = True  # tests may drive RegisterDags themselves


class _LeaderParseThread(ParseThread):
    def running(self) -> bool:
        """Whether its thread (and so a parse it started) is still running."""
        return self._thread.is_alive()


class LeaderLoop(LeaderTick):
    """Thread-safe status attributes: ``became_leader_at``, ``first_commit_at`` (unix times,
    None when not leading) and ``backpressure`` (as of the last tick; ``backpressure_now``
    reads it live). ``start``/``stop`` from one thread."""

    def __init__(
        self,
        node: SchedulerNode,
        proposer: Proposer,
        settings: LoopSettings,
        *,
        clock: Callable[[], datetime] = clock_now,
    ) -> None:
        self._node = node
        self._proposer = proposer
        self._settings = settings
        self._clock = clock
        # A stopped state machine (a bug; see node.apply_error) schedules nothing more.
        self._runner = LeadingThread(
            node,
            self._lead,
            name="leader-loop",
            retry_after=0.5,
            failed=lambda _err: log.exception("leader loop failed; retrying"),
            may_lead=lambda: not getattr(self._node, "apply_error", None),
            after=self._step_down,
        )
        self._wake = self._runner.wake
        self._stop = self._runner.stopping
        self._dirty_lock = threading.Lock()
        self._dirty: set[str] = set()
        self._active = False
        self._due = DueIndex()
        self._parser: _LeaderParseThread | None = None
        self._retired: list[_LeaderParseThread] = []  # stopped, their last parse not ended
        self._parse_after = 0.0  # monotonic time before which this term starts no parse
        self._tick_cpu = TickCpu()
        self._pipeline = None
        self._in_flight = InFlightDecisions()
        self._term = -1
        self.became_leader_at: float | None = None
        self.first_commit_at: float | None = None
        self.leader_gap: Gap | None = None  # no leader before this term (skip_causes)
        self.backpressure = False
        self.ticks = 0
        # Set by the runtime: while it returns a reason (the metadata DB and the log disagree,
        # or were not compared yet this term) a tick creates, queues and expires nothing.
        self.hold: Callable[[], str | None] | None = None
        # Raises the cluster version once every member runs this release (rolling upgrades)
        self._finalizer = Finalizer(node, proposer)
        self.held: str | None = None
        node.add_apply_listener(self._on_apply)
        node.add_role_listener(lambda _role: self._wake.set())
        # Every node (leader or not) logs a stalled tick thread and what it applied meanwhile.
        self.tick_watch = TickWatch()
        self._raft = getattr(node, "raft", None)  # absent in tests' fakes
        if self._raft is not None:
            node.add_apply_listener(self.tick_watch.on_apply)
            self._raft.add_tick_callback(self.tick_watch.on_tick)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._runner.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._runner.stop(timeout)
        self._node.remove_apply_listener(self._on_apply)
        if self._raft is not None:
            self._node.remove_apply_listener(self.tick_watch.on_apply)
            self._raft.remove_tick_callback(self.tick_watch.on_tick)

    def wake(self) -> None:
        self._wake.set()

    def backpressure_now(self, outbox_size: int) -> bool:
        """Whether a leader with this outbox would hold back new runs now."""
        return self.became_leader_at is not None and outbox_size >= self._settings.max_outbox

    # -- the loop (runs on self._runner's thread while this node leads) -----------------------

    def _leading(self) -> bool:
        return (
            not self._stop.is_set()
            and self._node.is_leader
            and self._node.term == self._term
            and self._node.fatal_error is None
            and getattr(self._node, "apply_error", None) is None
        )

    def _lead(self, term: int) -> None:
        self._term = term
        self.became_leader_at = time.time()
        log.info("leader loop started (term %d)", term)
        with self._dirty_lock:
            self._active = True
        clock = self._node.read(lambda state: state.clock)  # the last commit before this term
        barrier = self._proposer.make(Batch, commands=())
        if self._propose(barrier) is None or not self._leading():
            return
        # no leader from the last commit to this one: labels the slots it made us miss
        fresh = clock.year <= 1970  # a new cluster's state has committed nothing yet
        self.leader_gap = None if fresh else leader_gap(clock, self._clock())
        self.first_commit_at = time.time()
        log.info(
            "first commit as leader %.3fs after the loop started (term %d)",
            self.first_commit_at - self.became_leader_at,
            term,
        )
        self._rebuild_due()
        # A term that inherits DAGs schedules them at once and parses the folder a little
        # later (see _start_parser); a first leader with no DAGs parses at once.
        self._parse_after = time.monotonic() + (PARSE_SETTLE if len(self._due) else 0.0)
        last_tick = 0.0
        while self._leading():
            self._start_parser()
            gap = time.monotonic() - last_tick
            if gap < _MIN_TICK_GAP:
                self._stop.wait(_MIN_TICK_GAP - gap)
            last_tick = time.monotonic()
            self._wake.clear()
            self._tick_cpu.start()
            self._tick()
            self._tick_cpu.stop()
            self.ticks += 1
            self._finalize_upgrade()
            if not self._leading():
                break
            self._wake.wait(self._sleep_seconds())

    def _leader_stamp(self) -> tuple[Any, ...]:
        """(term, this node's address) for this term's CreateRuns, once every node knows the
        field (cluster version 3; the gate refuses it before)."""
        if self._node.read(lambda state: state.cluster_version) < TERMS_SINCE:
            return ()
        return (self._term, str(getattr(self._node, "leader_address", None) or ""))

    def _start_parser(self) -> None:
        """Start this term's DAG parse thread, once no earlier term's parse still runs.

        ``ParseThread.stop`` lets a parse in progress finish in the background (its children
        are bounded by their timeouts). A node that won several terms in a row while the
        cluster was busy started one more full parse each time, and at 10,000 DAGs those
        piled up (a dozen parse children at once) and fed the elections that caused them.
        Until the last one has ended, the loop schedules from the DAGs already
        committed and tries again at the next tick.

        A term that inherited DAGs waits ``PARSE_SETTLE`` seconds first: a full parse of a
        big folder costs many CPU-seconds of child processes, and a leader elected in a busy
        minute that began one at once made the next election likelier. The committed DAGs
        are scheduled meanwhile; a changed file is picked up that much later after a
        failover."""
        if self._parser is not None or not self._settings.parse:
            return
        if time.monotonic() < self._parse_after:
            return
        self._retired = [old for old in self._retired if old.running()]
        if self._retired:
            return
        self._parser = _LeaderParseThread(
            self._settings.dags_folder,
            timeout=self._settings.dag_file_timeout,
            output_limit=self._settings.dag_file_output_limit,
            full_interval=self._settings.min_file_process_interval,
            catchup_by_default=self._settings.catchup_by_default,
            on_result=self._wake.set,
            instruments=getattr(self._node, "instruments", None),
        )
        self._parser.start()

    def _finalize_upgrade(self) -> None:
        try:
            self._finalizer.maybe_finalize()
        except RaftschedError as err:  # no quorum, a timeout: asked again next time
            log.info("leader loop: cluster version not raised yet: %s", err)

    def _step_down(self) -> None:
        self._end_pipeline()
        with self._dirty_lock:
            self._active = False
            self._dirty.clear()
        if self._parser is not None:
            # A node that only lost its term does not sit out the parse (see _start_parser);
            # one that stops waits for it, as before.
            self._parser.stop(timeout=5.0 if self._stop.is_set() else 0.1)
            if self._parser.running():  # a parse in progress: see _start_parser
                self._retired.append(self._parser)
            self._parser = None
        if self.became_leader_at is not None:
            log.info("leader loop stopped (term %d)", self._term)
        self.became_leader_at = None
        self.first_commit_at = None
        self.backpressure = False

    def _sleep_seconds(self) -> float:
        longest = min(self._settings.scheduler_heartbeat_sec, 1.0)
        wakeup = self._due.next_wakeup()
        if wakeup is None or self.backpressure:  # an ack wakes us when the outbox drains
            return longest
        return max(0.0, min(longest, (wakeup - self._clock()).total_seconds()))

    def _propose(self, command: Command) -> r.Result | None:
        try:
            return self._proposer.propose(
                command,
                deadline=self._proposer.commit_timeout,
                should_continue=self._leading,
            )
        except RaftschedError as err:
            log.info("leader loop: %s not committed: %s", type(command).__name__, err)
            return None
