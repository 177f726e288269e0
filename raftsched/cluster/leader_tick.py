"""One tick of the leader loop (:class:`LeaderTick`, mixed into ``leader.LeaderLoop``), and the
DueIndex that follows the committed state.

Each tick:

1. DAG files: take the parse thread's latest result, compare spec hashes with the replicated
   DAGs, propose RegisterDags / RemoveDags / SetImportErrors for what changed.
2. Due runs from the DueIndex -> CreateRuns (at most ``max_runs_per_tick``, and at most
   ``RUNS_IN_FLIGHT`` in flight over all ticks' entries), unless the outbox holds
   ``max_outbox`` entries or more (back-pressure: the DB is behind). The slot maths runs
   outside the state lock.
3. QueueTasks for tasks whose upstreams are done or whose retry time came.
4. ExpireLeases for leases past their expiry.

The first CreateRuns chunk and steps 3-4 go out as one Batch, the other chunks as entries of
their own. Nothing waits for a commit: the entries join this term's ``Pipeline`` (up to
``PIPELINE_DEPTH`` in flight, settled in order at the next ticks), and what is in flight is
left out of the next decisions (``InFlightDecisions``). The DueIndex follows the committed
state: an apply listener marks the DAGs each committed command touched, and the loop re-reads
those records. The loop sleeps until the next due time, at most ``min(scheduler_heartbeat_sec,
1 s)``, and wakes early on a commit that may make work or a new parse result.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from raftsched.cluster.leader_commands import (
    DAGS_PER_ENTRY,
    RUNS_IN_FLIGHT,
    RUNS_PER_COMMAND,
    InFlightDecisions,
    _dag_changes,
    _dag_count,
    _queue_command,
    _run_chunks,
    _touched_dags,
)
from raftsched.cluster.leader_walks import LeaderWalks
from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.parsing import ParseThread
from raftsched.cluster.proposer import Pipeline, Proposer
from raftsched.cluster.versions import hold_back_new_dags
from raftsched.core import results as r
from raftsched.core.commands import (
    AppendLogs,
    Batch,
    Command,
    CreateRuns,
    ExpireLeases,
    HeartbeatLeases,
    HeartbeatTriggers,
    LeaseTasks,
    LeaseTriggers,
    QueueTasks,
)
from raftsched.core.due import DueIndex, due_fields
from raftsched.core.model import DagSpec, ImportErrorRecord
from raftsched.core.skip_causes import Gap
from raftsched.core.slot_policy import max_active
from raftsched.core.versions import BASELINE_RELEASE

if TYPE_CHECKING:
    from raftsched.cluster.leader import LoopSettings
    from raftsched.core.state import SchedulerState

log = logging.getLogger("raftsched.cluster.leader")  # the leader loop's one logger

# Commits that cannot create work for the leader loop (they do not wake it). An ack does:
# it may end back-pressure.
_QUIET = (LeaseTasks, HeartbeatLeases, AppendLogs, QueueTasks, LeaseTriggers, HeartbeatTriggers)
# Entries of one tick in flight at once (the leader does not wait for each commit before
# proposing the next: a round trip per entry would bound the runs created per second).
# The tick thread applies every entry committed by one round trip
# in one go, so depth x RUNS_PER_COMMAND bounds that stretch too (measured: README Benchmarks).
PIPELINE_DEPTH = 4
# DAG records a new leader reads under the state lock at a time to build its DueIndex.
REBUILD_CHUNK = 500


class LeaderTick(LeaderWalks):
    """The tick and the DueIndex of ``leader.LeaderLoop``; the attributes below are the loop's
    (set in its ``__init__``)."""

    _node: SchedulerNode
    _proposer: Proposer
    _settings: LoopSettings
    _clock: Callable[[], datetime]
    _wake: threading.Event
    _dirty_lock: threading.Lock
    _dirty: set[str]
    _active: bool
    _due: DueIndex
    _parser: ParseThread | None
    _pipeline: Pipeline | None  # this term's proposals in flight (leader thread only)
    _in_flight: InFlightDecisions
    backpressure: bool
    hold: Callable[[], str | None] | None
    held: str | None
    leader_gap: Gap | None  # leader.LeaderLoop's: no leader before this term (skip_causes)

    if TYPE_CHECKING:
        # leader.LeaderLoop's
        def _leading(self) -> bool: ...
        def _propose(self, command: Command) -> r.Result | None: ...
        def _leader_stamp(self) -> tuple[Any, ...]: ...

    # -- one tick ----------------------------------------------------------------------------

    def _tick(self) -> None:
        pipeline = self._pipeline
        if pipeline is not None:
            pipeline.poll()  # settle what committed since the last tick (marks the DueIndex)
            if pipeline.failed and pipeline.in_flight == 0:
                pipeline.reset()  # the committed state says what is left to decide
        self.held = self.hold() if self.hold is not None else None
        if self.held is not None:
            return
        self._refresh_due()
        if self._parser is not None:
            parsed = self._parser.take()
            if parsed is not None:
                self._sync_dags(*parsed)
                self._refresh_due()
        if not self._leading():
            return
        now = self._clock()
        commands: list[Command] = []
        budget = RUNS_IN_FLIGHT - self._in_flight.runs  # see RUNS_IN_FLIGHT
        runs = self._collect_runs(now, budget) if budget > 0 else []
        run_chunks = _run_chunks(runs, RUNS_PER_COMMAND)
        if run_chunks:  # stamped with the term that makes them (core/run_terms.py)
            make = partial(self._proposer.make, CreateRuns, now=now, leader=self._leader_stamp())
            commands.append(make(runs=run_chunks[0]))
        in_flight = self._in_flight
        queue = in_flight.fresh_queue(self._node.read(lambda state: state.ready_to_queue(now)))
        queue_cmd = _queue_command(self._proposer, queue, now)
        if queue_cmd is not None:
            commands.append(queue_cmd)
        expired = in_flight.fresh_expiry(
            self._node.read(lambda state: list(state.expired_leases(now)))
        )
        if expired:
            commands.append(self._proposer.make(ExpireLeases, leases=tuple(expired), now=now))
        commands += self._walk_commands(now)  # deadlines, trigger and run timeouts
        if not commands or not self._leading():
            return
        first = (
            commands[0]
            if len(commands) == 1
            else self._proposer.make(Batch, commands=tuple(commands), now=now)
        )
        # Pipelined (a round trip per entry would bound throughput): each entry is proposed
        # without waiting for the one before to
        # commit, up to PIPELINE_DEPTH in flight across ticks; results come back in order and
        # mark the DueIndex. What is in flight is left out of the next ticks' decisions
        # (InFlightDecisions): a DAG with runs in flight gets no capacity in _collect_runs, so
        # two entries with runs of one DAG are never in flight together (apply skips a slot at
        # or before the DAG's last one: a later chunk committed first would make an earlier
        # one skip its slots).
        self._propose_pipelined(first)
        for chunk in run_chunks[1:]:
            if not self._leading() or (self._pipeline is not None and self._pipeline.failed):
                break
            if not in_flight.dags.isdisjoint(d.dag_id for d in chunk):
                continue  # a DAG split over chunks (more runs than one entry): the next tick
            self._propose_pipelined(make(runs=chunk))
        if self._pipeline is not None:
            self._pipeline.poll()  # what committed meanwhile (its DAGs free for the next tick)

    def _propose_pipelined(self, command: Command) -> None:
        """Submit ``command`` to this term's pipeline; its decisions are in flight until it
        settles (``_settled``)."""
        pipeline = self._pipeline
        if pipeline is None:
            pipeline = self._pipeline = self._new_pipeline()
        self._in_flight.add(command)
        pipeline.submit(command, lambda res, ok: self._settled(command, res, ok))

    def _new_pipeline(self) -> Pipeline:
        return Pipeline(
            self._proposer,
            max_in_flight=PIPELINE_DEPTH,
            deadline=self._proposer.commit_timeout,
            should_continue=self._leading,
            on_callback=self._wake.set,
        )

    def _settled(self, command: Command, result: r.Result | None, committed: bool) -> None:
        self._in_flight.release(command)
        if not committed or result is None:
            return  # decided again from the committed state by a later tick
        pairs = (
            list(zip(command.commands, result.value or (), strict=False))
            if isinstance(command, Batch)
            else [(command, result)]
        )
        for sub, sub_result in pairs:
            if isinstance(sub, CreateRuns):
                self._mark_created(sub, sub_result)

    def _end_pipeline(self) -> None:
        """The end of a term: forget what is in flight (the next leader, this node again or
        another, decides from the committed state)."""
        if self._pipeline is not None:
            dropped = self._pipeline.abandon()
            if dropped:
                log.info("leader loop: %d proposals in flight at the end of the term", len(dropped))
        self._pipeline = None
        self._in_flight.clear()

    def _collect_runs(self, now: datetime, budget: int) -> list[Any]:
        """The runs due at ``now`` that this tick may propose (bounded: a burst of due DAGs
        must not stall the tick thread). The due index's slot maths (croniter) runs outside the
        state lock; only each
        DAG's capacity is read under it, one short read per DAG, so apply on the tick thread
        (which also sends the heartbeats) never waits for a whole tick's worth of DAGs."""
        outbox_size = self._node.read(lambda state: state.outbox_size)
        self.backpressure = outbox_size >= self._settings.max_outbox
        if self.backpressure:
            return []

        in_flight = self._in_flight.dags

        def room_of(state: SchedulerState, dag_id: str) -> int:
            record = state.dags.get(dag_id)
            if record is None:
                return 0
            return max_active(record.spec) - state.active_run_count(dag_id)

        def capacity(dag_id: str) -> int:
            # At most one entry's worth of runs per DAG and tick: a tick then spreads over
            # many DAGs, whose entries can be in flight together (see _tick); a DAG with a
            # longer backlog gets its next chunk in the next tick.
            room = self._node.read(lambda state: room_of(state, dag_id))
            return min(room, RUNS_PER_COMMAND)

        room = self._settings.max_outbox - outbox_size  # each run adds >= 1 entry
        limit = min(self._settings.max_runs_per_tick, room, budget)
        # Skipped slots are recorded once every node knows skip decisions (core/versions.py);
        # before, a DAG without a policy field schedules exactly as the previous release.
        record_skips = self._node.read(lambda state: state.cluster_version > BASELINE_RELEASE)
        return self._due.collect(
            now,
            capacity=capacity,
            limit=limit,
            busy=in_flight.__contains__,
            record_skips=record_skips,
            leader_gap=self.leader_gap,
        )

    def _mark_created(self, command: CreateRuns, result: r.Result) -> None:
        items = result.value if isinstance(result.value, (list, tuple)) else ()
        for decision, item in zip(command.runs, items, strict=False):
            reason = getattr(item, "reason", "")
            if reason == r.INVALID:  # a slot apply cannot take: skip it, never retry forever
                log.error(
                    "DAG %s: no run for %s: %s",
                    decision.dag_id,
                    decision.logical_date.isoformat(),
                    getattr(item, "value", "") or reason,
                )
            skipped, last = getattr(decision, "skip_reason", ""), decision.logical_date
            if getattr(item, "ok", False) and skipped:  # a range of slots, not a run
                log.debug("DAG %s: slots to %s skipped: %s", decision.dag_id, last, skipped)
            elif getattr(item, "ok", False):
                run = {"dag_id": decision.dag_id, "run_id": str(getattr(item, "value", ""))}
                log.debug("run %s of %s created", run["run_id"], decision.dag_id, extra=run)
            if decision.end_active == "cancel":  # no run: the slot waits for the cancelled one
                if getattr(item, "ok", False):
                    self._due.mark_cancelled(decision.dag_id)
                continue
            if getattr(item, "ok", False) or reason in (r.RUN_EXISTS, r.INVALID, r.POLICY):
                ran = getattr(item, "ok", False) and not decision.skip_reason
                self._due.mark_created(decision.dag_id, decision.logical_date, run=ran)

    def _sync_dags(self, specs: list[DagSpec], errors: list[ImportErrorRecord]) -> None:
        paused = self._settings.dags_are_paused_at_creation
        specs, errors = hold_back_new_dags(self._node, specs, errors)  # a mixed-release cluster
        commands = self._node.read(
            lambda state: _dag_changes(self._proposer, state, specs, errors, paused)
        )
        if not commands or not self._leading():
            return
        log.info("DAG files changed: proposing %s", ", ".join(type(c).__name__ for c in commands))
        if sum(_dag_count(c) for c in commands) > DAGS_PER_ENTRY:
            # Many DAGs (a first parse of a big folder): one entry each, in order, so no
            # apply holds the tick thread long enough to cost an election (10 x 1,000 specs
            # in one Batch did, on 2 busy cores). A failure stops here; the next parse
            # proposes what is still missing.
            for command in commands:
                if not self._leading() or self._propose(command) is None:
                    return
            return
        command = (
            commands[0]
            if len(commands) == 1
            else self._proposer.make(Batch, commands=tuple(commands))
        )
        self._propose(command)

    # -- the DueIndex follows the committed state ---------------------------------------------

    def _on_apply(self, log_index: int, command: Command, result: r.Result) -> None:
        """Tick thread, under the state lock: only record and wake."""
        with self._dirty_lock:
            if not self._active:
                return
            self._dirty.update(_touched_dags(command))
        if not isinstance(command, _QUIET):
            self._wake.set()

    def _rebuild_due(self) -> None:
        """A fresh DueIndex from the replicated DAGs. Only the records are read under the
        state lock: building the timetables of 10,000 DAGs takes seconds on a busy machine,
        and apply (on the tick thread, which also answers heartbeats) waits for that lock."""

        def dag_ids(state: SchedulerState) -> list[str]:
            with self._dirty_lock:
                self._dirty.clear()  # a change committed from here on marks its DAG again
            return list(state.dags)

        def records(state: SchedulerState, chunk: list[str]) -> list[Any]:
            out = []
            for dag_id in chunk:
                record = state.dags.get(dag_id)
                if record is not None and record.active:
                    out.append((record.spec, due_fields(record)))
            return out

        # The records are read REBUILD_CHUNK DAGs at a time: a new leader of 10,000 DAGs,
        # elected in a busy minute, held the lock for the whole list while the host starved
        # it of CPU (a DAG added meanwhile is marked dirty and read at the next tick).
        due = DueIndex()
        ids = self._node.read(dag_ids)
        for first in range(0, len(ids), REBUILD_CHUNK):
            chunk = ids[first : first + REBUILD_CHUNK]
            for spec, fields in self._node.read(lambda state, c=chunk: records(state, c)):
                due.upsert(spec, **fields)
        self._due = due
        log.info("due index rebuilt: %d active DAGs", len(self._due))

    def _refresh_due(self) -> None:
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
        if not dirty:
            return

        def records(state: SchedulerState) -> list[Any]:
            out = []
            for dag_id in dirty:
                record = state.dags.get(dag_id)
                if record is None or not record.active:
                    out.append((dag_id, None, {}))
                else:
                    out.append((dag_id, record.spec, due_fields(record)))
            return out

        # The timetables are built outside the state lock (see _rebuild_due); a change
        # committed meanwhile marks its DAG dirty again and is read next tick.
        for dag_id, spec, fields in self._node.read(records):
            if spec is None:
                self._due.remove(dag_id)
            else:
                self._due.upsert(spec, **fields)
