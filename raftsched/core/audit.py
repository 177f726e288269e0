"""The audit log: who triggered, paused, cleared, marked, backfilled, or changed a variable or
connection, and when, decided by apply from the committed commands.

The API puts the caller into the command it proposes (``actor``: a token's name, or the web
user's name and the webserver's token, ``api/actor.py``), so the record is part of the log:
every replica makes the same one at the same index, and it survives any failover. A command
without an actor (the leader's own decisions, entries written before this existed) records
nothing; a refused command changed nothing and records nothing either.

:class:`AuditLog` owns the records every replica holds: the newest MAX_AUDIT_RECORDS (bounded
memory; the digest and the snapshot see them, and only once there is one, so a state without
any digests and snapshots exactly as before). Each record also leaves apply as an AUDIT outbox
entry, so the metadata DB (table ``audit_log``) keeps every one, written exactly once.
Records exist only from release 3 on (``core.persisted``), which the version gate already
ensures: a command with an actor is refused until the upgrade is finished.

Pure, like the rest of the core. Not thread-safe (apply's thread, or the node's lock).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from raftsched.core import asset_commands as acm
from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import limits as lim
from raftsched.core import persisted
from raftsched.core import pool_commands as pc
from raftsched.core import results as r
from raftsched.core.changes import emit_entry
from raftsched.core.model import OutboxKind, RunType, TaskKey, TaskState
from raftsched.core.results import Result
from raftsched.core.rows import AuditRow

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

# Backfill runs are manual runs named so (api/servicers/backfill.py backfill_run_id)
BACKFILL_PREFIX = "backfill__"
AUDITED = (c.SetPaused, c.CreateRuns, c.ClearTasks, c.MarkTasks, c.SetSecret, c.DeleteSecret)
AUDITED += (pc.SetPool, pc.DeletePool)
AUDITED += (acm.EmitAssetEvents,)  # an event from outside (§21)
ACTIONS = (
    "trigger",
    "backfill",
    "pause",
    "unpause",
    "clear",
    "mark_success",
    "mark_failed",
    "set_variable",
    "delete_variable",
    "set_connection",
    "delete_connection",
    "read_variable",  # an attempt read it undeclared (core/secret_reads.py)
    "read_connection",
    "set_pool",
    "delete_pool",
    "asset_event",
)


def fp_audit(row: AuditRow) -> str:
    return "audit:" + dg.canonical(_to_list(row))


class AuditLog:
    """The newest records, oldest first. Owns their digest shares."""

    __slots__ = ("_records", "_sum")

    def __init__(self, digest_sum: dg.DigestSum) -> None:
        self._records: deque[AuditRow] = deque()
        self._sum = digest_sum

    def __bool__(self) -> bool:
        return bool(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[AuditRow]:
        return iter(self._records)

    @property
    def next_id(self) -> int:
        # The window never empties once it holds one: the last id is always at hand
        return self._records[-1].id + 1 if self._records else 1

    def add(self, row: AuditRow) -> None:
        self._records.append(row)
        self._sum.add(fp_audit(row))
        while len(self._records) > lim.MAX_AUDIT_RECORDS:
            self._sum.remove(fp_audit(self._records.popleft()))

    def fingerprints(self) -> Iterator[str]:
        return (fp_audit(row) for row in self._records)

    def to_list(self) -> list[list[Any]]:
        return [_to_list(row) for row in self._records]

    def load(self, data: Any) -> None:
        """Restore (a snapshot's ``audit``, or None); the caller recomputes the digest."""
        for item in data or ():
            id_, index, at, actor, action, dag_id, run_id, detail = item
            wire = {"id": id_, "log_index": index, "at": at, "actor": actor, "action": action}
            wire |= {"dag_id": dag_id, "run_id": run_id, "detail": detail}
            self._records.append(AuditRow.from_wire(wire))


def _to_list(row: AuditRow) -> list[Any]:
    wire = row.to_wire()
    return [wire[name] for name in ("id", "log_index", "at", "actor", "action")] + [
        wire["dag_id"],
        wire["run_id"],
        wire["detail"],
    ]


def record(state: SchedulerState, cmd: Any, result: Result, now: datetime, index: int) -> None:
    """Record what ``cmd`` (applied with ``result``) changed, when an actor asked for it."""
    actor = getattr(cmd, "actor", "")
    if not actor or not result.ok or not isinstance(cmd, AUDITED):
        return
    if not persisted.persists(state):  # before release 3 there is no audit log (see the module doc)
        return
    for action, dag_id, run_id, detail in _what(cmd, result):
        row = AuditRow(
            id=state.audit.next_id,
            log_index=index,
            at=now,
            actor=actor,
            action=action,
            dag_id=dag_id,
            run_id=run_id,
            detail=detail[: lim.MAX_AUDIT_DETAIL_CHARS],
        )
        state.audit.add(row)
        emit_entry(state, OutboxKind.AUDIT, row.to_wire())


def record_task_trigger(
    state: SchedulerState,
    by: TaskKey,
    dag_id: str,
    run_id: str,
    now: datetime,
    index: int,
    reset: bool = False,
) -> None:
    """A TriggerDagRunOperator task (``by``) created run ``run_id`` of ``dag_id`` (or, with
    ``reset``, cleared it: reset_dag_run): a "trigger" record whose actor names the task
    (core/dagrun_trigger.py)."""
    if not persisted.persists(state):
        return
    actor = f"task {by.task_id} of {by.dag_id}/{by.run_id}"[: lim.MAX_ACTOR_CHARS]
    row = AuditRow(
        id=state.audit.next_id,
        log_index=index,
        at=now,
        actor=actor,
        action="trigger",
        dag_id=dag_id,
        run_id=run_id,
        detail="TriggerDagRunOperator" + (" reset_dag_run: cleared" if reset else ""),
    )
    state.audit.add(row)
    emit_entry(state, OutboxKind.AUDIT, row.to_wire())


def _what(cmd: Any, result: Result) -> list[tuple[str, str, str, str]]:
    """(action, dag_id, run_id, detail) of each record ``cmd`` makes."""
    if isinstance(cmd, c.SetPaused):
        unchanged = " (it already was)" if result.reason == r.UNCHANGED else ""
        return [("pause" if cmd.paused else "unpause", cmd.dag_id, "", unchanged.strip(" ()"))]
    if isinstance(cmd, c.CreateRuns):
        return _runs(cmd, result)
    if isinstance(cmd, acm.EmitAssetEvents):
        return _events(cmd, result)
    if isinstance(cmd, c.ClearTasks | c.MarkTasks):
        tasks = ", ".join(cmd.task_ids) or "every task"
        if isinstance(cmd, c.ClearTasks):
            downstream = " and downstream" if cmd.include_downstream else ""
            return [("clear", cmd.dag_id, cmd.run_id, f"{tasks}{downstream}")]
        state = TaskState(cmd.state).value
        return [(f"mark_{state}", cmd.dag_id, cmd.run_id, tasks)]
    if isinstance(cmd, pc.SetPool):  # detail: "etl 4 slots" ("unchanged" when it was so)
        unchanged = " unchanged" if result.reason == r.UNCHANGED else ""
        return [("set_pool", "", "", f"{cmd.name} {cmd.slots} slots{unchanged}")]
    if isinstance(cmd, pc.DeletePool):
        return [("delete_pool", "", "", cmd.name)]
    verb = "set" if isinstance(cmd, c.SetSecret) else "delete"
    detail = "unchanged" if result.reason == r.UNCHANGED else ""
    return [(f"{verb}_{cmd.kind}", "", "", f"{cmd.key}{' ' if detail else ''}{detail}")]


def _events(cmd: Any, result: Result) -> list[tuple[str, str, str, str]]:
    """One record per new event from outside (a repeated event id makes none)."""
    out = []
    for event, item in zip(cmd.events, result.value or (), strict=False):
        if item.ok and item.reason != acm.DUPLICATE_EVENT:
            runs = ", ".join(f"{d}/{r}" for d, r in item.value["runs"])
            detail = f"event {item.value['event_id']} of {event.uri}"
            detail += f": {runs}" if runs else ""
            out.append(("asset_event", "", "", detail))
    return out


def _runs(cmd: c.CreateRuns, result: Result) -> list[tuple[str, str, str, str]]:
    """A trigger per manual run created; one backfill record per command (its slots)."""
    out: list[tuple[str, str, str, str]] = []
    backfill: list[tuple[str, c.RunDecision]] = []
    for decision, item in zip(cmd.runs, result.value or (), strict=False):
        if not item.ok or RunType(decision.run_type) is not RunType.MANUAL:
            continue
        run_id = str(item.value)
        if run_id.startswith(BACKFILL_PREFIX):
            backfill.append((run_id, decision))
        else:
            out.append(("trigger", decision.dag_id, run_id, ""))
    if backfill:
        first, last = backfill[0][1].logical_date, backfill[-1][1].logical_date
        detail = f"{len(backfill)} runs, {first.isoformat()} .. {last.isoformat()}"
        out.append(("backfill", backfill[0][1].dag_id, backfill[0][0], detail))
    return out
