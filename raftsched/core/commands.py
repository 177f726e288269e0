"""Commands: the only inputs of ``SchedulerState.apply``.

Each command is a small frozen dataclass that pickles small. It carries a unique
``request_id`` (made by the proposer; a repeat is answered with the first result and never
applied twice) and ``now`` (the proposer's clock, because apply reads no clock). Commands carry
decisions in batches: the leader computes "create these runs", apply re-checks each decision's
precondition and turns a stale or duplicate one into a no-op with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from raftsched.core.model import (
    DagSpec,
    ImportErrorRecord,
    RunType,
    TaskKey,
    TaskState,
    added_field,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    request_id: str
    now: datetime


# -- DAGs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterDags(Command):
    """Add or update DAGs (a spec whose spec_hash is unchanged is a no-op). A DAG seen for the
    first time starts paused when ``paused_at_creation`` (Airflow's
    ``dags_are_paused_at_creation``); an update keeps its paused flag."""

    specs: tuple[DagSpec, ...] = ()
    paused_at_creation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveDags(Command):
    """DAGs whose file no longer defines them: deactivated (history is kept)."""

    dag_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SetImportErrors(Command):
    """Replace the set of import errors (one per failing file)."""

    errors: tuple[ImportErrorRecord, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SetPaused(Command):
    dag_id: str
    paused: bool
    # Who asked (core/audit.py): a user or token name, "" for the cluster's own decisions
    # and entries written before it existed
    actor: str = added_field("")
    # Why (pausing only): shown with the DAG until it is unpaused
    note: str = added_field("")


# -- runs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunDecision:
    dag_id: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    run_type: RunType = RunType.SCHEDULED
    conf: dict[str, Any] = field(default_factory=dict)
    run_id: str = ""  # empty: apply derives "<run_type>__<logical_date iso>"
    # Not "": no run; the scheduled slots data_interval_start..logical_date (their logical
    # dates) are recorded as skipped for this reason (core/slot_policy.py) and the schedule
    # moves past them. ``skipped_slots``: how many they are (0: not counted).
    skip_reason: str = ""
    skipped_slots: int = 0
    # "cancel"|"terminate": end the active runs first (run_ending.py); a cancel creates no run
    end_active: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateRuns(Command):
    """Create runs. Refused per decision (reason in the result) when the DAG is unknown or
    inactive, a run for (dag_id, logical_date) already exists, or — for scheduled runs — the DAG
    is paused or max_active_runs is reached."""

    runs: tuple[RunDecision, ...] = ()
    actor: str = added_field("")  # who asked (core/audit.py)
    leader: tuple[Any, ...] = added_field(())  # (term, leader id) proposing (core/run_terms.py)


# -- tasks --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueDecision:
    key: TaskKey
    expected_state: TaskState  # NONE or UP_FOR_RETRY: compare-and-set
    try_number: int  # the TI's try_number the leader saw


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueTasks(Command):
    """Mark ready tasks QUEUED (their upstreams satisfy the trigger rule, a retry's time has
    come). Also carries decisions that tasks can never run (UPSTREAM_FAILED/SKIPPED)."""

    items: tuple[QueueDecision, ...] = ()
    unreachable: tuple[tuple[TaskKey, TaskState], ...] = ()  # (key, UPSTREAM_FAILED|SKIPPED)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseTasks(Command):
    """A worker asks for up to ``max_tasks`` queued tasks. apply picks them from the ready
    queue (priority_weight desc, then queued_at, then key: deterministic) among the tasks of
    its ``queues``, honouring each DAG's max_active_tasks, and grants each a Lease whose token
    is this command's log index."""

    worker_id: str
    max_tasks: int = 1
    lease_ttl_seconds: float = 30.0
    # Only tasks of these queues; empty: the default queue alone (what entries written before
    # queues existed mean).
    queues: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LeaseRef:
    key: TaskKey
    token: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatLeases(Command):
    """Extend live leases to now + ttl. A lease whose token is not current is refused: the
    worker must kill that attempt."""

    worker_id: str
    leases: tuple[LeaseRef, ...] = ()
    lease_ttl_seconds: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteAttempt(Command):
    """An attempt's outcome. Refused unless ``token`` is the TI's current lease token and
    ``worker_id`` the worker that holds it. ``chunks``: the attempt's last log output,
    appended before the outcome (logs sent after the outcome are refused: the lease is gone)."""

    key: TaskKey
    token: int
    success: bool
    exit_code: int | None = None
    message: str = ""
    chunks: tuple[LogChunk, ...] = ()
    worker_id: str = ""  # the lease's holder; "" only in entries written before it was checked
    # The attempt's return value as JSON text ("" = none; core/xcom.py bounds it)
    result_json: str = added_field("")
    # A branch's choice: the direct downstream task ids to follow (None: not a branch)
    follow: tuple[str, ...] | None = added_field(None)
    # The attempt ended SKIPPED (a bash skip_on_exit_code, a task that raised TaskSkipped)
    skipped: bool = added_field(False)
    outlet_extras: tuple[tuple[str, str], ...] = added_field(())  # (URI, extra): outlet_events


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseLeases(Command):
    """A worker hands attempts back unfinished (shutdown): they are queued again without
    counting as a failure."""

    worker_id: str
    leases: tuple[LeaseRef, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpireLeases(Command):
    """Leases the leader saw expired (expires_at <= now). apply re-checks token and expiry; an
    expired attempt fails and goes up for retry if it has tries left."""

    leases: tuple[LeaseRef, ...] = ()


@dataclass(frozen=True, slots=True)
class LogChunk:
    stream: str  # "stdout" | "stderr"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendLogs(Command):
    """Log output of a running attempt; refused with a stale token or from another worker
    than the lease's holder."""

    key: TaskKey
    token: int
    chunks: tuple[LogChunk, ...] = ()
    worker_id: str = ""  # the lease's holder; "" only in entries written before it was checked


@dataclass(frozen=True, slots=True, kw_only=True)
class ClearTasks(Command):
    """Rerun tasks of a run (and, if asked, everything downstream): their state goes back to
    NONE, max_tries grows so they get their retries again, and the run becomes RUNNING."""

    dag_id: str
    run_id: str
    task_ids: tuple[str, ...] = ()
    include_downstream: bool = True
    actor: str = added_field("")  # who asked (core/audit.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkTasks(Command):
    """Force tasks of a run to SUCCESS or FAILED (an operator's override); a live lease on them
    is revoked, so its worker's next heartbeat is refused."""

    dag_id: str
    run_id: str
    task_ids: tuple[str, ...] = ()
    state: TaskState
    actor: str = added_field("")  # who asked (core/audit.py)


# -- variables and connections -----------------------------------------------------------

SECRET_KINDS = ("variable", "connection")


@dataclass(frozen=True, slots=True, kw_only=True)
class SetSecret(Command):
    """Create or replace a variable or a connection (``kind``) named ``key``. ``ciphertext``:
    the value as a Fernet token, encrypted by the API node (no clear value enters the log, a
    snapshot or the state; the core refuses what is not a Fernet token). ``expected``:
    compare-and-set on the current ciphertext (a key rotation keeps a concurrent change);
    None: set whatever is there. ``dags``: the DAGs that may read it (core/secret_policy.py)."""

    kind: str
    key: str
    ciphertext: str
    description: str = ""
    expected: str | None = None
    actor: str = added_field("")  # who asked (core/audit.py)
    dags: tuple[str, ...] = added_field(())  # empty: any DAG may read it


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteSecret(Command):
    """Delete a variable or a connection (``kind``) named ``key``."""

    kind: str
    key: str
    actor: str = added_field("")  # who asked (core/audit.py)


# -- materialization ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AckMaterialized(Command):
    """Outbox entries up to and including ``seq`` are in the DB: every replica drops them.
    Then finished runs whose entries are all acked and which ended at least
    ``finished_run_retention_seconds`` before ``now`` leave memory (the DB keeps them)."""

    seq: int
    finished_run_retention_seconds: float = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch(Command):
    """Several commands in one Raft entry, applied in order; the result is the list of their
    results. Lets the leader commit a whole tick's decisions at once."""

    commands: tuple[Command, ...] = ()


# -- releases -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SetClusterVersion(Command):
    """Raise the cluster version (core/versions.py) to ``version``: from then on commands of
    that release may be proposed, and a node of an older release can no longer apply the
    log (an upgrade's finalization; there is no way back). The leader proposes it only once
    every member reported a release >= ``version``. A lower or equal version changes
    nothing."""

    version: int


# -- callbacks (core/callbacks.py, core/handlers_callbacks.py) ----------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseCallbacks(Command):
    """A worker asks for up to ``max_jobs`` callback jobs (pending, or whose lease expired),
    oldest first; each is granted with this command's log index as its fencing token until
    ``now + lease_ttl_seconds`` (a callback is short and bounded: no heartbeats)."""

    worker_id: str
    max_jobs: int = 1
    lease_ttl_seconds: float = 120.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteCallback(Command):
    """A callback job's outcome, with its output (appended to the log its job names). Refused
    unless ``token`` is the job's current lease and ``worker_id`` its holder. Final either
    way: a callback that failed is logged, not run again."""

    worker_id: str
    job_id: str
    token: int
    success: bool
    message: str = ""
    chunks: tuple[LogChunk, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class MissDeadlines(Command):
    """Runs (dag_id, run_id) the leader saw past their DAG's deadline and not done: apply
    re-checks each against ``now`` and alerts each run once (its "deadline" callbacks)."""

    runs: tuple[tuple[str, str], ...] = ()


# -- triggers and deferred tasks (core/trigger_table.py, core/handlers_triggers.py) -------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeferTask(Command):
    """The holder of a task's lease ends its attempt waiting on a trigger: the task becomes
    DEFERRED (no worker slot) until the trigger fires, times out (``timeout_seconds``; None:
    never) or the task is cleared or marked. Refused unless ``token`` is the current lease
    and ``worker_id`` its holder, like CompleteAttempt."""

    worker_id: str
    key: TaskKey
    token: int
    kind: str
    args_json: str = "{}"
    method_name: str = "execute_complete"
    kwargs_json: str = "{}"
    timeout_seconds: float | None = None
    chunks: tuple[LogChunk, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseTriggers(Command):
    """A triggerer asks for up to ``max_triggers`` triggers no live lease holds, oldest
    first; each is granted with this command's log index as its fencing token until ``now +
    lease_ttl_seconds`` (the triggerer renews with HeartbeatTriggers)."""

    triggerer_id: str
    max_triggers: int = 100
    lease_ttl_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class TriggerRef:
    """A trigger (its deferred task) as its current lease names it."""

    key: TaskKey
    token: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatTriggers(Command):
    """The triggerer still runs these triggers: their leases last ``lease_ttl_seconds`` more.
    A trigger whose lease is not current is refused (the triggerer stops running it)."""

    triggerer_id: str
    triggers: tuple[TriggerRef, ...] = ()
    lease_ttl_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class TriggerFiring:
    """A trigger fired with ``event_json`` (a JSON value), or raised: ``error`` is its
    traceback, and its task's attempt fails with it in the task's log."""

    ref: TriggerRef
    event_json: str = "null"
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class FireTriggers(Command):
    """Firings reported by the triggerer holding their leases: each fired trigger's task is
    queued again and its next lease carries the event (refused: a stale token, another
    triggerer, a trigger no longer held)."""

    triggerer_id: str
    firings: tuple[TriggerFiring, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutTriggers(Command):
    """Deferred tasks the leader saw past their trigger's timeout: apply re-checks each
    against ``now`` and fails its attempt."""

    keys: tuple[TaskKey, ...] = ()
