"""Handlers for DAG commands: register (new versions), remove, import errors, pause.

A new DAG starts unpaused unless ``RegisterDags.paused_at_creation``. DAG versions (specs) are
shared by hash and reference-counted (``catalog.DagCatalog``): the current version of each DAG
plus the version each live run executes.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from raftsched.core import asset_watchers as watchers
from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core.changes import emit_entry, set_dag
from raftsched.core.limits import MAX_IMPORT_ERROR_CHARS, clean_text
from raftsched.core.model import DagRecord, ImportErrorRecord, OutboxKind
from raftsched.core.results import Item, Result
from raftsched.core.rows import ImportErrorsRow
from raftsched.core.skip_causes import paused_changed, registered
from raftsched.core.validate_specs import check_spec

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState


def on_spec_change(state: SchedulerState, dag_id: str, condition: str | None, old: str) -> None:
    from raftsched.core import handlers_assets  # not at the top: it imports this module

    handlers_assets.on_spec_change(state, dag_id, condition, old)


def on_unpause(state: SchedulerState, dag_id: str, now: datetime) -> None:
    from raftsched.core import handlers_assets

    handlers_assets.on_unpause(state, dag_id, now)


def is_aware(value: Any) -> bool:
    return isinstance(value, datetime) and value.utcoffset() is not None


def apply_register_dags(
    state: SchedulerState, cmd: c.RegisterDags, now: datetime, index: int
) -> Result:
    items = []
    for spec in cmd.specs:
        try:
            check_spec(spec)
        except Exception as err:  # LimitExceeded; or a malformed value of another release
            items.append(Item(False, r.INVALID, str(err)))
            continue
        if not spec.spec_hash:
            spec = replace(spec, spec_hash=spec.compute_hash())
        record = state.catalog.get(spec.dag_id)
        if record is not None and record.active and record.spec.spec_hash == spec.spec_hash:
            items.append(Item(True, r.UNCHANGED, spec.dag_id))
            continue
        spec = state.catalog.ref_spec(spec)
        if record is None:
            gaps = registered(state.cluster_version, now)  # slots before this: not parsed
            if cmd.paused_at_creation:
                gaps = paused_changed(gaps, True, now, state.cluster_version)
            new = DagRecord(spec, paused=cmd.paused_at_creation, gaps=gaps)
        else:
            state.catalog.unref_spec(record.spec.spec_hash)
            new = replace(record, spec=spec, active=True)
        set_dag(state, new, emit=True, now=now)
        state.task_queue.unblock(spec.dag_id)  # max_active_tasks may have grown
        old = record.spec.asset_condition if record is not None and record.active else ""
        on_spec_change(state, spec.dag_id, spec.asset_condition, old)  # assets (§21)
        old_watchers = record.spec.asset_watchers if record is not None and record.active else ""
        watchers.sync(state, spec.dag_id, old_watchers, spec.asset_watchers, spec.fileloc, now)
        items.append(Item(True, "", spec.dag_id))
    return Result.of_items(items)


def apply_remove_dags(
    state: SchedulerState, cmd: c.RemoveDags, now: datetime, index: int
) -> Result:
    items = []
    for dag_id in cmd.dag_ids:
        record = state.catalog.get(dag_id)
        if record is None:
            items.append(Item(False, r.UNKNOWN_DAG, dag_id))
        elif not record.active:
            items.append(Item(True, r.UNCHANGED, dag_id))
        else:
            set_dag(state, replace(record, active=False), emit=True, now=now)
            on_spec_change(state, dag_id, None, record.spec.asset_condition)
            watchers.sync(state, dag_id, record.spec.asset_watchers, "", "", now)
            items.append(Item(True, "", dag_id))
    return Result.of_items(items)


def apply_set_import_errors(
    state: SchedulerState, cmd: c.SetImportErrors, now: datetime, index: int
) -> Result:
    errors = tuple(  # texts a DAG file produced: sanitized and cut, never refused
        ImportErrorRecord(
            e.fileloc,
            clean_text(e.message[:MAX_IMPORT_ERROR_CHARS]),
            clean_text(e.traceback[:MAX_IMPORT_ERROR_CHARS]),
        )
        for e in cmd.errors
    )
    if errors == state.catalog.import_errors:
        return Result(True, r.UNCHANGED)
    state.catalog.import_errors = errors
    rows = tuple((e.fileloc, e.message, e.traceback) for e in errors)
    emit_entry(state, OutboxKind.IMPORT_ERRORS, ImportErrorsRow(rows, now).to_wire())
    return Result(True)


def apply_set_paused(state: SchedulerState, cmd: c.SetPaused, now: datetime, index: int) -> Result:
    record = state.catalog.get(cmd.dag_id)
    if record is None:
        return Result(False, r.UNKNOWN_DAG)
    note = cmd.note if cmd.paused else ""
    if record.paused == bool(cmd.paused) and (not note or note == record.pause_note):
        return Result(True, r.UNCHANGED)
    gaps = record.gaps
    if record.paused != bool(cmd.paused):  # slots missed while paused: skip_causes
        gaps = paused_changed(gaps, bool(cmd.paused), now, state.cluster_version)
    changed = replace(record, paused=bool(cmd.paused), pause_note=note, gaps=gaps)
    set_dag(state, changed, emit=record.paused != bool(cmd.paused), now=now)
    if not cmd.paused:
        state.task_queue.unblock(cmd.dag_id)
        on_unpause(state, cmd.dag_id, now)  # events queued while paused (§21)
    return Result(True)
