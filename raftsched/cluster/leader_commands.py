"""What the leader loop proposes, as pure functions of the replicated state: the CreateRuns
chunks of a tick (:func:`_run_chunks`), the QueueTasks of a tick (:func:`_queue_command`), the
commands that make the replicated DAGs match one parse of the folder (:func:`_dag_changes`),
and the DAGs a committed command touched (:func:`_touched_dags`, for the DueIndex).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from raftsched.cluster.proposer import Proposer
from raftsched.core.commands import (
    Batch,
    Command,
    CreateRuns,
    ExpireLeases,
    MissDeadlines,
    QueueTasks,
    RegisterDags,
    RemoveDags,
    SetImportErrors,
    SetPaused,
    TimeoutTriggers,
)
from raftsched.core.limits import MAX_DAGS_PER_COMMAND
from raftsched.core.model import DagSpec, ImportErrorRecord
from raftsched.core.run_timeout import TimeoutRuns

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

# Runs per CreateRuns entry. apply runs on pysyncobj's single tick thread on every replica, which
# also sends and answers heartbeats: a 500-run entry takes 80-130 ms to apply
# (scripts/bench/state_machine.py), close to the 150 ms election timeout, and a cluster catching
# up changed leader every few seconds. 50 runs apply in ~10 ms; a tick's other runs follow in
# further entries.
RUNS_PER_COMMAND = 50
# Runs in the CreateRuns entries in flight at once, over all of them. pysyncobj
# applies every entry that one round trip committed in one tick, on the thread that also sends
# the leader's heartbeats, and the followers do the same: four 50-run entries took 150-220 ms
# between the first apply and the last at a load of 10 on 2 cores (TickWatch), longer than the
# 150 ms election timeout, and a 1,000-DAG burst cost 3-14 elections. With 100 (two entries; one
# applies in ~6 ms of CPU alone) the same burst at a load of 6.5 saw 110-130 ms between the
# first and the last apply of a round trip, and no election (scripts/bench/throughput.py).
RUNS_IN_FLIGHT = 100
# DAGs per RegisterDags/RemoveDags entry (the core allows MAX_DAGS_PER_COMMAND): registering
# 10,000 DAGs as 1,000-spec entries held the tick thread long enough for elections.
DAGS_PER_ENTRY = min(250, MAX_DAGS_PER_COMMAND)


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


class InFlightDecisions:
    """What the leader proposed and has not yet seen settle (proposals are
    pipelined, so a tick runs while earlier ones are still in flight).

    A tick decides nothing about what is in flight: no run of a DAG with a CreateRuns in
    flight (its DueIndex entry moves only once that commits, and two entries with runs of one
    DAG must never be in flight together: see ``Pipeline``), no QueueTasks item and no expired
    lease already proposed. An entry's marks go when it settles, committed or given up (apply
    re-checks every precondition, so a decision proposed again after an unknown outcome is a
    no-op if the first one committed after all). Leader thread only.
    """

    def __init__(self) -> None:
        self.dags: set[str] = set()
        self.runs = 0  # runs in the CreateRuns in flight (bounded by RUNS_IN_FLIGHT)
        self.queued: set[Any] = set()  # TaskKeys of QueueTasks items
        self.expiring: set[Any] = set()  # TaskKeys of ExpireLeases leases
        self.alerting: set[Any] = set()  # (dag_id, run_id) of MissDeadlines runs
        self.timing_out: set[Any] = set()  # (dag_id, run_id) of TimeoutRuns runs

    def __len__(self) -> int:
        marks = (self.dags, self.queued, self.expiring, self.alerting, self.timing_out)
        return sum(len(m) for m in marks)

    def add(self, command: Command) -> None:
        self._mark(command, add=True)

    def release(self, command: Command) -> None:
        self._mark(command, add=False)

    def clear(self) -> None:
        self.dags.clear()
        self.runs = 0
        self.queued.clear()
        self.expiring.clear()
        self.alerting.clear()
        self.timing_out.clear()

    def fresh_queue(self, items: Any) -> list[Any]:
        """QueueTasks items not already in flight."""
        return [item for item in items or () if item.key not in self.queued]

    def fresh_expiry(self, leases: Any) -> list[Any]:
        """Expired leases not already in flight."""
        return [lease for lease in leases or () if lease.key not in self.expiring]

    def fresh_alerts(self, runs: Any) -> list[Any]:
        """Runs past their deadline not already in a MissDeadlines in flight."""
        return [run for run in runs or () if run not in self.alerting]

    def fresh_timeouts(self, keys: Any) -> list[Any]:
        """Deferred tasks past their timeout not already in a TimeoutTriggers in flight (a
        deferred task holds no lease, so they share ``expiring`` with expired leases)."""
        return [key for key in keys or () if key not in self.expiring]

    def fresh_run_timeouts(self, runs: Any) -> list[Any]:
        """Runs past their dagrun_timeout not already in a TimeoutRuns in flight."""
        return [run for run in runs or () if run not in self.timing_out]

    def _mark(self, command: Command, *, add: bool) -> None:
        if isinstance(command, Batch):
            for sub in command.commands:
                self._mark(sub, add=add)
            return
        if isinstance(command, CreateRuns):
            keys: list[Any] = [run.dag_id for run in command.runs]
            target = self.dags
            self.runs = max(0, self.runs + (len(command.runs) if add else -len(command.runs)))
        elif isinstance(command, QueueTasks):
            keys, target = [item.key for item in command.items], self.queued
        elif isinstance(command, ExpireLeases):
            keys, target = [lease.key for lease in command.leases], self.expiring
        elif isinstance(command, MissDeadlines):
            keys, target = list(command.runs), self.alerting
        elif isinstance(command, TimeoutTriggers):
            keys, target = list(command.keys), self.expiring
        elif isinstance(command, TimeoutRuns):
            keys, target = list(command.runs), self.timing_out
        else:
            return
        if add:
            target.update(keys)
        else:
            target.difference_update(keys)
