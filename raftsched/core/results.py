"""What ``SchedulerState.apply`` answers: a small frozen ``Result`` and its stable reasons.

A command either applies (``ok``), or is a no-op with a short, stable ``reason`` the API maps
to a gRPC status code. Commands that carry many decisions (CreateRuns, QueueTasks, heartbeat,
...) answer one :class:`Item` per decision in ``Result.value`` (same order as the command's
decisions); ``Result.ok`` is then true when every item is ok and ``Result.reason`` is the
first refusal's reason. A repeated ``request_id`` answers the first result with
``duplicate=True``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, NamedTuple

from raftsched.core.model import Lease, TaskSpec, added_field, utc_iso

# -- reasons (stable strings; never reword one, add a new one) ------------------------------

UNCHANGED = "unchanged"  # ok, but nothing to do (same spec hash, already paused, ...)
UNKNOWN_DAG = "unknown_dag"
INACTIVE_DAG = "inactive_dag"  # removed from its file; no new runs
PAUSED = "paused"
MAX_ACTIVE_RUNS = "max_active_runs"
MAX_RUNS = "max_runs"  # the DAG made its max_runs scheduled runs
POLICY = "policy"  # a skip decision its DAG's schedule policy does not give (value: why)
RUN_EXISTS = "run_exists"  # (dag_id, logical_date) or (dag_id, run_id) taken, or slot passed
UNKNOWN_RUN = "unknown_run"  # never existed, or finished and evicted from memory
UNKNOWN_TASK = "unknown_task"
STALE_TOKEN = "stale_token"  # the lease is not (any more) the attempt's current one
WRONG_WORKER = "wrong_worker"  # the token is current but another worker holds it
NOT_EXPIRED = "not_expired"  # ExpireLeases for a lease renewed since
STATE_CHANGED = "state_changed"  # compare-and-set on the expected prior state failed
NOT_READY = "not_ready"  # the trigger rule does not (yet) give that verdict
NOT_DUE = "not_due"  # a retry whose next_retry_at has not come
STALE_ACK = "stale_ack"  # AckMaterialized at or below the current acked seq
ACK_BEYOND_LAST = "ack_beyond_last"  # AckMaterialized past the last outbox seq
INVALID = "invalid"  # a malformed command or a value past a bound (value: the message)
STALE_INDEX = "stale_index"  # log_index not above applied_index: never applied twice
UNKNOWN_COMMAND = "unknown_command"
INTERNAL_ERROR = "internal_error"  # a bug: a handler raised; the state stopped applying
HALTED = "halted"  # the state stopped applying after a bug (``SchedulerState.halted``)
OUTBOX_FULL = "outbox_full"  # the outbox is at its hard cap: no new leases or log appends

OK_REASONS = frozenset({"", UNCHANGED})


class Item(NamedTuple):
    """The outcome of one decision inside a batch-style command."""

    ok: bool
    reason: str = ""
    value: Any = None


@dataclass(frozen=True, slots=True)
class Result:
    ok: bool
    reason: str = ""
    value: Any = None
    duplicate: bool = False

    @classmethod
    def of_items(cls, items: list[Item] | tuple[Item, ...]) -> Result:
        items = tuple(items)
        refused = next((item.reason for item in items if not item.ok), "")
        return cls(ok=not refused, reason=refused, value=items)


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """One granted attempt and everything the worker needs to run it (answer of LeaseTasks)."""

    lease: Lease
    task: TaskSpec
    fileloc: str
    logical_date: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    conf: dict[str, Any] = field(default_factory=dict)
    max_tries: int = 1
    # The run's DAG params (DagSpec.params_json): the worker renders templates with them
    params_json: str = added_field("")
    # A resumed deferral's {"method", "kwargs", "event"} as JSON ("" = a fresh attempt)
    resume_json: str = added_field("")

    @property
    def try_number(self) -> int:
        return self.lease.try_number

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the API turns it into its message)."""
        key = self.lease.key
        return {
            "dag_id": key.dag_id,
            "run_id": key.run_id,
            "task_id": key.task_id,
            "try_number": self.lease.try_number,
            "max_tries": self.max_tries,
            "worker_id": self.lease.worker_id,
            "token": self.lease.token,
            "expires_at": utc_iso(self.lease.expires_at),
            "task": task_spec_dict(self.task),
            "fileloc": self.fileloc,
            "logical_date": utc_iso(self.logical_date),
            "data_interval_start": utc_iso(self.data_interval_start),
            "data_interval_end": utc_iso(self.data_interval_end),
            "conf": dict(self.conf),
        }


def task_spec_dict(task: TaskSpec) -> dict[str, Any]:
    """A TaskSpec as the JSON-able dict ``DagSpec.to_dict`` uses for each of its tasks."""
    data: dict[str, Any] = {f.name: getattr(task, f.name) for f in fields(task)}
    data["env"] = [list(pair) for pair in task.env]
    data["upstream"] = list(task.upstream)
    data["trigger_rule"] = str(task.trigger_rule)
    return data
