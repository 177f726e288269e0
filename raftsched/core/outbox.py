"""The outbox and change tracking: how apply's effects leave the state machine as data.

A handler *touches* an entity before changing it (its old digest contribution is subtracted,
and whether it needs an outbox row is noted); :func:`flush` ends the command by writing the
outbox rows of changed task instances, then runs, and re-adding their digest contributions.
The materializer reads entries with ``SchedulerState.outbox_after`` and acknowledges them
with ``AckMaterialized`` (:func:`ack` drops them; eviction of finished runs is in
``handlers_runs``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from raftsched.core import digest as dg
from raftsched.core import results as r
from raftsched.core import snapshot as sn
from raftsched.core.limits import OUTBOX_HARD_CAP_ENTRIES, OUTBOX_HARD_CAP_LOG_CHARS
from raftsched.core.model import (
    FINISHED_RUN_STATES,
    DagRecord,
    OutboxEntry,
    OutboxKind,
    TaskInstance,
)

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState
    from raftsched.core.transitions import LiveRun, RunKey


def emit_entry(state: SchedulerState, kind: OutboxKind, data: dict) -> int:
    state._last_seq += 1
    entry = OutboxEntry(state._last_seq, kind, data)
    state._outbox.append(entry)
    state._outbox_log_chars += log_chars(entry)
    state._sum.add(dg.fp_outbox(entry))
    return entry.seq


def log_chars(entry: OutboxEntry) -> int:
    """Characters of log text an entry holds (what the outbox's hard cap counts)."""
    return len(entry.data["text"]) if entry.kind is OutboxKind.TASK_LOG else 0


def is_full(state: SchedulerState) -> bool:
    """At the hard cap (``core.limits``): new leases and log appends are refused."""
    return (
        len(state._outbox) >= OUTBOX_HARD_CAP_ENTRIES
        or state._outbox_log_chars >= OUTBOX_HARD_CAP_LOG_CHARS
    )


def touch_ti(state: SchedulerState, ti: TaskInstance, emit: bool = True) -> None:
    key = ti.key
    if key not in state._dirty_tis:
        state._sum.remove(dg.fp_ti(ti))
        state._dirty_tis[key] = emit
    elif emit:
        state._dirty_tis[key] = True


def touch_run(state: SchedulerState, rec: LiveRun, emit: bool = True) -> None:
    key = rec.key
    if key not in state._dirty_runs:
        state._sum.remove(dg.fp_run(rec.run, rec.spec.spec_hash, rec.row_seq))
        state._dirty_runs[key] = emit
    elif emit:
        state._dirty_runs[key] = True


def set_dag(
    state: SchedulerState, record: DagRecord, emit: bool, now: datetime | None = None
) -> None:
    dag_id = record.spec.dag_id
    old = state._dags.get(dag_id)
    if old is not None and dag_id not in state._dirty_dags:
        state._sum.remove(dg.fp_dag(dag_id, old))
    state._dirty_dags.add(dag_id)
    if emit:
        record = replace(record, updated_at=now)
    state._dags[dag_id] = record
    if dag_id in state._parked:
        _release_parked(state, old, record)
    if emit:
        emit_entry(state, OutboxKind.DAG, sn.dag_row(record))


def _release_parked(state: SchedulerState, old: DagRecord | None, new: DagRecord) -> None:
    """Back to the eviction queue: parked runs of this DAG its schedule has now reached
    (all of them if the DAG's version or activity changed: they are looked at again)."""
    dag_id = new.spec.dag_id
    same = old is not None and (old.spec.spec_hash, old.active) == (new.spec.spec_hash, new.active)
    last = new.last_logical_date
    parked = state._parked.pop(dag_id)
    kept: dict[RunKey, None] = {}
    for key in parked:
        rec = state._runs.get(key[0], {}).get(key[1])
        if rec is None or rec.run.end_date is None or rec.run.state not in FINISHED_RUN_STATES:
            continue  # gone, or running again (cleared): it is queued again when it ends
        if same and (last is None or rec.run.logical_date > last):
            kept[key] = None
        else:
            state._finished.push(rec.run.end_date, key)
    if kept:
        state._parked[dag_id] = kept


def flush(state: SchedulerState) -> None:
    """End of a command: write outbox rows of changed TIs then runs; re-add digests."""
    for key, emit in state._dirty_tis.items():
        ti = state.task_instance(key)
        if ti is not None:
            if emit:
                emit_entry(state, OutboxKind.TASK_INSTANCE, sn.ti_row(ti))
            state._sum.add(dg.fp_ti(ti))
    for (dag_id, run_id), emit in state._dirty_runs.items():
        rec = state._runs.get(dag_id, {}).get(run_id)
        if rec is not None:
            if emit:
                rec.row_seq = emit_entry(state, OutboxKind.DAG_RUN, sn.run_row(rec.run))
            state._sum.add(dg.fp_run(rec.run, rec.spec.spec_hash, rec.row_seq))
    for dag_id in state._dirty_dags:
        state._sum.add(dg.fp_dag(dag_id, state._dags[dag_id]))
    state._dirty_tis.clear()
    state._dirty_runs.clear()
    state._dirty_dags.clear()


def ack(state: SchedulerState, seq: int) -> str:
    """Drop the entries up to ``seq`` (materialized); the refusal reason, or "" if done."""
    if seq > state._last_seq:
        return r.ACK_BEYOND_LAST
    if seq <= state._acked_seq:
        return r.STALE_ACK
    while state._outbox and state._outbox[0].seq <= seq:
        entry = state._outbox.popleft()
        state._outbox_log_chars -= log_chars(entry)
        state._sum.remove(dg.fp_outbox(entry))
    state._acked_seq = seq
    return ""
