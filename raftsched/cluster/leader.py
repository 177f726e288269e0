"""The leader loop: while this node leads, turn time and DAG files into committed decisions.

Runs in its own thread; it acts only while ``node.is_leader`` holds for the term it started
in, and checks that between steps. Leadership alone never causes a side effect: every
decision is a command, and only what commits counts (a minority leader's proposals do not
commit; apply refuses a stale one).

On winning an election: commit a barrier (an empty Batch) so the state includes everything
committed before this term, rebuild the DueIndex from the state, start the DAG parse thread.
Each tick then:

1. DAG files: take the parse thread's latest result, compare spec hashes with the replicated
   DAGs, propose RegisterDags / RemoveDags / SetImportErrors for what changed.
2. Due runs from the DueIndex -> CreateRuns (at most ``max_runs_per_tick``), unless the
   outbox holds ``max_outbox`` entries or more (back-pressure: the DB is behind).
3. QueueTasks for tasks whose upstreams are done or whose retry time came.
4. ExpireLeases for leases past their expiry.

Steps 2-4 commit together as one Batch. The DueIndex follows the committed state: an apply
listener marks the DAGs each committed command touched, and the loop re-reads those records.
The loop sleeps until the next due time, at most ``min(scheduler_heartbeat_sec, 1 s)``, and
wakes early on a commit that may make work or a new parse result.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raftsched.clock import now as clock_now
from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.parsing import ParseThread
from raftsched.cluster.proposer import Pipeline, Proposer
from raftsched.core import results as r
from raftsched.core.commands import (
    AppendLogs,
    Batch,
    Command,
    CreateRuns,
    ExpireLeases,
    HeartbeatLeases,
    LeaseTasks,
    QueueTasks,
    RegisterDags,
    RemoveDags,
    SetImportErrors,
    SetPaused,
)
from raftsched.core.due import DueIndex
from raftsched.core.limits import MAX_DAGS_PER_COMMAND
from raftsched.core.model import DagSpec, ImportErrorRecord
from raftsched.errors import RaftschedError

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

log = logging.getLogger(__name__)

# Commits that cannot create work for the leader loop (they do not wake it). An ack does:
# it may end back-pressure.
_QUIET = (LeaseTasks, HeartbeatLeases, AppendLogs, QueueTasks)
_MIN_TICK_GAP = 0.01  # coalesce bursts of commits into one tick


# Runs per CreateRuns entry. apply runs on pysyncobj's single tick thread on every replica, which
# also sends and answers heartbeats: a 500-run entry takes 80-130 ms to apply
# (scripts/bench/state_machine.py), close to the 150 ms election timeout, and a cluster catching
# up changed leader every few seconds. 50 runs apply in ~10 ms; a tick's other runs follow in
# further entries.
RUNS_PER_COMMAND = 50
# Entries of one tick in flight at once (issue #11: the leader no longer waits for each commit
# before proposing the next). The tick thread applies every entry committed by one round trip
# in one go, so depth x RUNS_PER_COMMAND bounds that stretch too (measured: README Benchmarks).
PIPELINE_DEPTH = 4
# DAGs per RegisterDags/RemoveDags entry (the core allows MAX_DAGS_PER_COMMAND): registering
# 10,000 DAGs as 1,000-spec entries held the tick thread long enough for elections.
DAGS_PER_ENTRY = min(250, MAX_DAGS_PER_COMMAND)


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


class LeaderLoop:
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
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dirty_lock = threading.Lock()
        self._dirty: set[str] = set()
        self._active = False
        self._due = DueIndex()
        self._parser: ParseThread | None = None
        self._term = -1
        self.became_leader_at: float | None = None
        self.first_commit_at: float | None = None
        self.backpressure = False
        self.ticks = 0
        # Set by the runtime: while it returns a reason (the metadata DB and the log disagree,
        # or were not compared yet this term) a tick creates, queues and expires nothing.
        self.hold: Callable[[], str | None] | None = None
        self.held: str | None = None
        node.add_apply_listener(self._on_apply)
        node.add_role_listener(lambda _role: self._wake.set())

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._node.remove_apply_listener(self._on_apply)

    def wake(self) -> None:
        self._wake.set()

    def backpressure_now(self, outbox_size: int) -> bool:
        """Whether a leader with this outbox would hold back new runs now."""
        return self.became_leader_at is not None and outbox_size >= self._settings.max_outbox

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            # A stopped state machine (a bug; see node.apply_error) schedules nothing more.
            if not self._node.is_leader or getattr(self._node, "apply_error", None):
                self._wake.wait(0.2)
                self._wake.clear()
                continue
            try:
                self._lead(self._node.term)
            except Exception:
                log.exception("leader loop failed; retrying")
                self._stop.wait(0.5)
            finally:
                self._step_down()

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
        barrier = self._proposer.make(Batch, commands=())
        if self._propose(barrier) is None or not self._leading():
            return
        self.first_commit_at = time.time()
        log.info(
            "first commit as leader %.3fs after the loop started (term %d)",
            self.first_commit_at - self.became_leader_at,
            term,
        )
        self._rebuild_due()
        if self._settings.parse:
            self._parser = ParseThread(
                self._settings.dags_folder,
                timeout=self._settings.dag_file_timeout,
                output_limit=self._settings.dag_file_output_limit,
                full_interval=self._settings.min_file_process_interval,
                catchup_by_default=self._settings.catchup_by_default,
                on_result=self._wake.set,
                instruments=getattr(self._node, "instruments", None),
            )
            self._parser.start()
        last_tick = 0.0
        while self._leading():
            gap = time.monotonic() - last_tick
            if gap < _MIN_TICK_GAP:
                self._stop.wait(_MIN_TICK_GAP - gap)
            last_tick = time.monotonic()
            self._wake.clear()
            self._tick()
            self.ticks += 1
            if not self._leading():
                break
            self._wake.wait(self._sleep_seconds())

    def _step_down(self) -> None:
        with self._dirty_lock:
            self._active = False
            self._dirty.clear()
        if self._parser is not None:
            self._parser.stop()
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

    # -- one tick ----------------------------------------------------------------------------

    def _tick(self) -> None:
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
        runs = self._node.read(lambda state: self._collect_runs(state, now))
        run_chunks = _run_chunks(runs, RUNS_PER_COMMAND)
        if run_chunks:
            commands.append(self._proposer.make(CreateRuns, runs=run_chunks[0], now=now))
        queue = self._node.read(lambda state: state.ready_to_queue(now))
        queue_cmd = _queue_command(self._proposer, queue, now)
        if queue_cmd is not None:
            commands.append(queue_cmd)
        expired = self._node.read(lambda state: list(state.expired_leases(now)))
        if expired:
            commands.append(self._proposer.make(ExpireLeases, leases=tuple(expired), now=now))
        if not commands or not self._leading():
            return
        command = (
            commands[0]
            if len(commands) == 1
            else self._proposer.make(Batch, commands=tuple(commands), now=now)
        )
        # Pipelined (issue #11): every entry of the tick is proposed without waiting for the
        # one before to commit, up to PIPELINE_DEPTH in flight; results come back in order and
        # mark the DueIndex. Two entries with runs of one DAG are never in flight together
        # (apply skips a slot at or before the DAG's last one: a later chunk committed first
        # would make an earlier one skip its slots), so such a chunk waits for the one before.
        pipeline = Pipeline(
            self._proposer,
            max_in_flight=PIPELINE_DEPTH,
            deadline=self._proposer.commit_timeout,
            should_continue=self._leading,
        )

        def first_done(result: r.Result | None, committed: bool) -> None:
            if not committed or result is None:
                return
            pairs = (
                list(zip(commands, result.value or (), strict=False))
                if isinstance(command, Batch)
                else [(command, result)]
            )
            for sub, sub_result in pairs:
                if isinstance(sub, CreateRuns):
                    self._mark_created(sub, sub_result)

        pipeline.submit(command, first_done)
        in_flight: set[str] = {d.dag_id for d in run_chunks[0]} if run_chunks else set()
        for chunk in run_chunks[1:]:
            if pipeline.failed or not self._leading():
                break
            dags = {d.dag_id for d in chunk}
            if not in_flight.isdisjoint(dags):
                pipeline.drain()
                in_flight = set()
            in_flight |= dags
            create = self._proposer.make(CreateRuns, runs=chunk, now=now)
            pipeline.submit(create, lambda res, ok, create=create: self._created(create, res, ok))
        pipeline.drain()

    def _created(self, command: CreateRuns, result: r.Result | None, committed: bool) -> None:
        if committed and result is not None:
            self._mark_created(command, result)

    def _collect_runs(self, state: SchedulerState, now: datetime) -> list[Any]:
        self.backpressure = state.outbox_size >= self._settings.max_outbox
        if self.backpressure:
            return []

        def capacity(dag_id: str) -> int:
            record = state.dags.get(dag_id)
            if record is None:
                return 0
            # At most one entry's worth of runs per DAG and tick: a tick then spreads over
            # many DAGs, whose entries can be in flight together (see _tick); a DAG with a
            # longer backlog gets its next chunk in the next tick.
            room = record.spec.max_active_runs - state.active_run_count(dag_id)
            return min(room, RUNS_PER_COMMAND)

        room = self._settings.max_outbox - state.outbox_size  # each run adds >= 1 entry
        limit = min(self._settings.max_runs_per_tick, room)
        return self._due.collect(now, capacity=capacity, limit=limit)

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
            if getattr(item, "ok", False):
                run = {"dag_id": decision.dag_id, "run_id": str(getattr(item, "value", ""))}
                log.debug("run %s of %s created", run["run_id"], decision.dag_id, extra=run)
            if getattr(item, "ok", False) or reason in (r.RUN_EXISTS, r.INVALID):
                self._due.mark_created(decision.dag_id, decision.logical_date)

    def _sync_dags(self, specs: list[DagSpec], errors: list[ImportErrorRecord]) -> None:
        paused = self._settings.dags_are_paused_at_creation
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

        def records(state: SchedulerState) -> list[Any]:
            with self._dirty_lock:
                self._dirty.clear()
            return [
                (record.spec, record.last_logical_date, record.paused)
                for record in state.dags.values()
                if record.active
            ]

        due = DueIndex()
        for spec, last, paused in self._node.read(records):
            due.upsert(spec, last_logical_date=last, paused=paused)
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
                    out.append((dag_id, None, None, False))
                else:
                    out.append((dag_id, record.spec, record.last_logical_date, record.paused))
            return out

        # The timetables are built outside the state lock (see _rebuild_due); a change
        # committed meanwhile marks its DAG dirty again and is read next tick.
        for dag_id, spec, last, paused in self._node.read(records):
            if spec is None:
                self._due.remove(dag_id)
            else:
                self._due.upsert(spec, last_logical_date=last, paused=paused)


def _run_chunks(runs: list[Any], size: int) -> list[tuple[Any, ...]]:
    """``runs`` (grouped by DAG, as ``DueIndex.collect`` returns them) in chunks of at most
    ``size``, cut between DAGs where possible: a DAG's runs share a chunk unless they alone
    exceed ``size`` (such chunks are then proposed one after the other, see ``_tick``)."""
    chunks: list[tuple[Any, ...]] = []
    current: list[Any] = []
    groups: list[list[Any]] = []
    for run in runs:
        if groups and groups[-1][0].dag_id == run.dag_id:
            groups[-1].append(run)
        else:
            groups.append([run])
    for group in groups:
        if current and len(current) + len(group) > size:
            chunks.append(tuple(current))
            current = []
        while len(group) > size:
            if current:
                chunks.append(tuple(current))
                current = []
            chunks.append(tuple(group[:size]))
            group = group[size:]
        current.extend(group)
    if current:
        chunks.append(tuple(current))
    return chunks


def _dag_count(command: Command) -> int:
    if isinstance(command, RegisterDags):
        return len(command.specs)
    if isinstance(command, RemoveDags):
        return len(command.dag_ids)
    return 0


def _touched_dags(command: Command) -> set[str]:
    if isinstance(command, Batch):
        out: set[str] = set()
        for sub in command.commands:
            out |= _touched_dags(sub)
        return out
    if isinstance(command, RegisterDags):
        return {spec.dag_id for spec in command.specs}
    if isinstance(command, RemoveDags):
        return set(command.dag_ids)
    if isinstance(command, SetPaused):
        return {command.dag_id}
    if isinstance(command, CreateRuns):
        return {run.dag_id for run in command.runs}
    return set()


def _dag_changes(
    proposer: Proposer,
    state: SchedulerState,
    specs: list[DagSpec],
    errors: list[ImportErrorRecord],
    paused_at_creation: bool = False,
) -> list[Command]:
    """The commands that make the replicated DAGs match one parse of the folder."""
    commands: list[Command] = []
    changed = tuple(
        spec
        for spec in specs
        if (record := state.dags.get(spec.dag_id)) is None
        or not record.active
        or record.spec.spec_hash != spec.spec_hash
    )
    for start in range(0, len(changed), DAGS_PER_ENTRY):  # <= the core's bound per command
        commands.append(
            proposer.make(
                RegisterDags,
                specs=changed[start : start + DAGS_PER_ENTRY],
                paused_at_creation=paused_at_creation,
            )
        )
    parsed = {spec.dag_id for spec in specs}
    broken = {error.fileloc for error in errors}  # a file that fails keeps its DAGs
    gone = tuple(
        sorted(
            dag_id
            for dag_id, record in state.dags.items()
            if record.active and dag_id not in parsed and record.spec.fileloc not in broken
        )
    )
    for start in range(0, len(gone), DAGS_PER_ENTRY):
        commands.append(proposer.make(RemoveDags, dag_ids=gone[start : start + DAGS_PER_ENTRY]))
    current = sorted(_import_errors(state), key=lambda e: e.fileloc)
    wanted = sorted(errors, key=lambda e: e.fileloc)
    if current != wanted:
        commands.append(proposer.make(SetImportErrors, errors=tuple(wanted)))
    return commands


def _import_errors(state: SchedulerState) -> list[ImportErrorRecord]:
    return list(state.import_errors)


def _queue_command(proposer: Proposer, queue: Any, now: datetime) -> Command | None:
    """ready_to_queue's decisions as a QueueTasks command (None when there are none)."""
    items = tuple(queue or ())
    return proposer.make(QueueTasks, items=items, now=now) if items else None
