"""On-demand reads of variables and connections: ``ReadSecrets`` (docs/architecture.md §22).

A task reads a variable or connection it did not declare (Airflow's ``Variable.get``,
``BaseHook.get_connection``) through its worker (``worker/secret_channel.py``); the worker asks
a node (``ResolveSecrets`` with ``on_demand``), and the node proposes this command before it
decrypts anything. Apply decides, on every replica alike: the attempt's lease is live (RUNNING,
this token, this worker, not past its expiry at the command's time), every name is set, and the
DAG may read each one (``core/secret_policy.py``). Then, and only then, it records one audit
record per name (who: the DAG, run, task, try and token; what: the name, never a value) and
answers ok; the node decrypts only after that answer. A refused read records nothing.

A new class, so the version gate (core/versions.py) refuses it until the cluster runs release 3.
Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from raftsched.core import commands as c
from raftsched.core import limits as lim
from raftsched.core import persisted
from raftsched.core import results as r
from raftsched.core import secret_policy as policy
from raftsched.core.changes import emit_entry
from raftsched.core.model import OutboxKind, TaskKey, TaskState
from raftsched.core.results import Result
from raftsched.core.rows import AuditRow
from raftsched.core.transitions import find
from raftsched.errors import LimitExceeded

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

# Reasons (stable strings, like those of core.results)
UNKNOWN_SECRET = "unknown_secret"  # a name that is not set
RESTRICTED = "restricted"  # the DAG may not read it (value: the message for the task)
LEASE_EXPIRED = "lease_expired"  # the lease is current but past its expiry


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadSecrets(c.Command):
    """The attempt of ``key`` under lease ``token``, held by ``worker_id``, reads ``names`` of
    ``kind`` ("variable" or "connection") without declaring them."""

    key: TaskKey
    token: int
    worker_id: str
    kind: str
    names: tuple[str, ...]


def check(cmd: ReadSecrets) -> None:
    if not isinstance(cmd.key, TaskKey):
        raise LimitExceeded("key", "must be a TaskKey")
    for name in ("dag_id", "run_id", "task_id"):
        lim.check_id(f"key.{name}", getattr(cmd.key, name))
    lim.check_int("token", cmd.token, 0, lim.MAX_TOKEN)
    lim.check_id("worker_id", cmd.worker_id)
    if not isinstance(cmd.kind, str) or cmd.kind not in c.SECRET_KINDS:
        raise LimitExceeded("kind", f"must be one of {', '.join(c.SECRET_KINDS)}")
    if not isinstance(cmd.names, tuple) or not cmd.names:
        raise LimitExceeded("names", "must be a non-empty tuple")
    lim.check_count("names", len(cmd.names), policy.MAX_NAMES_PER_READ)
    for i, name in enumerate(cmd.names):
        lim.check_text(f"names[{i}]", name, lim.MAX_SECRET_KEY_CHARS, empty=False)
        if not lim.SECRET_KEY_PATTERN.fullmatch(name):
            raise LimitExceeded(f"names[{i}]", "is not a variable or connection name")


def apply_read_secrets(
    state: SchedulerState, cmd: ReadSecrets, now: datetime, index: int
) -> Result:
    found = find(state, cmd.key)
    if found is None:
        return Result(False, r.UNKNOWN_TASK, cmd.key.task_id)
    _, ti = found
    lease = ti.lease
    if ti.state is not TaskState.RUNNING or lease is None or lease.token != cmd.token:
        return Result(False, r.STALE_TOKEN, cmd.token)
    if lease.worker_id != cmd.worker_id:
        return Result(False, r.WRONG_WORKER, cmd.worker_id)
    if lease.expires_at <= now:
        return Result(False, LEASE_EXPIRED, cmd.token)
    if state.outbox.is_full():  # its records go to the DB: refused like a log append
        return Result(False, r.OUTBOX_FULL, state.outbox_size)
    for name in cmd.names:  # all or nothing: check every name before recording any
        record = state.secrets.get((cmd.kind, name))
        if record is None:
            return Result(False, UNKNOWN_SECRET, name)
        why = policy.refusal(cmd.kind, name, record.dags, cmd.key.dag_id)
        if why is not None:
            return Result(False, RESTRICTED, why)
    if persisted.persists(state):
        who = f"task {cmd.key.task_id} try {lease.try_number} (token {cmd.token})"
        for name in cmd.names:
            row = AuditRow(
                id=state.audit.next_id,
                log_index=index,
                at=now,
                actor=f"worker {cmd.worker_id}"[: lim.MAX_ACTOR_CHARS],
                action=f"read_{cmd.kind}",
                dag_id=cmd.key.dag_id,
                run_id=cmd.key.run_id,
                detail=f"{name} by {who}"[: lim.MAX_AUDIT_DETAIL_CHARS],
            )
            state.audit.add(row)
            emit_entry(state, OutboxKind.AUDIT, row.to_wire())
    return Result(True, "", cmd.names)


CHECKS: dict[type, Callable[[Any], None]] = {ReadSecrets: check}
HANDLERS: dict[type, Callable[[Any, Any, datetime, int], Result]] = {
    ReadSecrets: apply_read_secrets
}

__all__ = [
    "CHECKS",
    "HANDLERS",
    "LEASE_EXPIRED",
    "RESTRICTED",
    "UNKNOWN_SECRET",
    "ReadSecrets",
    "apply_read_secrets",
]
