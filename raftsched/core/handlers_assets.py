"""Handlers of asset events: the events and the runs they make (docs/architecture.md §21).

An event enters the state two ways, each a committed entry: a successful attempt of a task
with ``outlets`` (:func:`on_task_success`, called by CompleteAttempt's apply: the events are
in the same apply as the outcome), and ``EmitAssetEvents`` from outside. Each event is queued
for every active DAG whose ``asset_condition`` names its URI; when a DAG's queued URIs
satisfy its condition, the same apply creates one run of it (``asset_triggered``) carrying
the queued events and empties its queue: no failover can separate an event from its run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from raftsched.core import asset_condition as ac
from raftsched.core.asset_commands import (
    DUPLICATE_EVENT,
    MAX_RUN_EVENTS,
    NOT_YET,
    SINCE_RELEASE,
    TOO_MANY_ASSETS,
    EmitAssetEvents,
)
from raftsched.core.asset_table import AssetEvent
from raftsched.core.changes import emit_entry
from raftsched.core.commands import RunDecision
from raftsched.core.model import OutboxKind, RunType, TaskInstance
from raftsched.core.results import Item, Result
from raftsched.core.run_table import LiveRun

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState


def apply_emit_asset_events(
    state: SchedulerState, cmd: EmitAssetEvents, now: datetime, index: int
) -> Result:
    if state.cluster_version < SINCE_RELEASE:
        return Result(False, NOT_YET)
    items = []
    for ev in cmd.events:
        if ev.key:
            seen = state.assets.event_for_key(ev.key)
            if seen is not None:
                items.append(Item(True, DUPLICATE_EVENT, {"event_id": seen, "runs": ()}))
                continue
        if not state.assets.room_for(ev.uri):
            items.append(Item(False, TOO_MANY_ASSETS))
            continue
        event_id, runs = emit(state, [ev.uri], ev.extra_json, now, key=ev.key, actor=cmd.actor)
        items.append(Item(True, "", {"event_id": event_id, "runs": runs}))
    return Result.of_items(items)


def on_task_success(
    state: SchedulerState,
    rec: LiveRun,
    ti: TaskInstance,
    now: datetime,
    outlet_extras: object = (),
) -> None:
    """A successful attempt of ``ti``: one event per outlet of its task (its run's spec), all
    queued before any consumer is decided, so ``a | b`` on two outlets of one task is one run
    (as in Airflow, where the scheduler sees both events together). ``outlet_extras``: the
    attempt's (URI, extra) pairs (checked before apply); an extra of a URI that is not an
    outlet of the task is ignored, and so is anything not in that shape (an entry a check
    never saw must not break apply)."""
    if state.cluster_version < SINCE_RELEASE:
        return
    task_id = ti.key.task_id.split("[", 1)[0]  # a mapped instance's task
    try:
        outlets = rec.spec.task(task_id).outlets
    except KeyError:
        return
    source = (ti.key.dag_id, ti.key.run_id, ti.key.task_id, ti.try_number)
    uris = [uri for uri in dict.fromkeys(outlets) if state.assets.room_for(uri)]
    emit(state, uris, extras_by_uri(outlet_extras, frozenset(uris)), now, source=source)


def extras_by_uri(value: object, uris: frozenset[str]) -> dict[str, str]:
    """The extras of ``value`` (CompleteAttempt.outlet_extras) of the URIs in ``uris``; what
    is not a (str, str) pair is left out. Never raises."""
    out: dict[str, str] = {}
    if not isinstance(value, tuple):
        return out
    for pair in value:
        if isinstance(pair, tuple) and len(pair) == 2:
            uri, extra = pair
            if isinstance(uri, str) and isinstance(extra, str) and uri in uris:
                out[uri] = extra
    return out


def emit(
    state: SchedulerState,
    uris: list[str],
    extra_json: str | dict[str, str],
    now: datetime,
    *,
    source: tuple[str, str, str, int] = ("", "", "", 0),
    key: str = "",
    actor: str = "",
) -> tuple[int, tuple[tuple[str, str], ...]]:
    """Commit one event per URI of ``uris`` (the caller checked room_for), queue them for
    their consumers, then make one run of each consumer whose condition they satisfy.
    ``extra_json``: every event's extra, or each URI's ("{}" for a URI it lacks).
    Returns (the last event's id, the runs' (dag_id, run_id))."""
    touched: dict[str, Any] = {}  # consumer -> its condition, in the order first reached
    event_id = 0
    for uri in uris:
        event = AssetEvent(
            id=state.assets.next_id(),
            uri=uri,
            extra_json=extra_json if isinstance(extra_json, str) else extra_json.get(uri, "{}"),
            timestamp=now,
            source_dag_id=source[0],
            source_run_id=source[1],
            source_task_id=source[2],
            source_try=source[3],
            key=key,
            actor=actor,
        )
        event_id = event.id
        state.assets.add(event)
        emit_entry(state, OutboxKind.ASSET_EVENT, event.to_dict())
        for dag_id, condition in consumers(state, uri):
            state.assets.queue(dag_id, event)
            touched.setdefault(dag_id, condition)
    runs = []
    for dag_id, condition in touched.items():
        run_id = _decide(state, dag_id, condition, now)
        if run_id:
            runs.append((dag_id, run_id))
    return event_id, tuple(runs)


def on_unpause(state: SchedulerState, dag_id: str, now: datetime) -> None:
    """A DAG was unpaused (SetPaused's apply): the events queued while it was paused may
    satisfy its condition now; if so, its run is made in this same apply."""
    record = state.catalog.get(dag_id)
    if state.cluster_version < SINCE_RELEASE or record is None or not state.assets.queued(dag_id):
        return
    if record.spec.asset_condition and record.active:
        _decide(state, dag_id, ac.parse(record.spec.asset_condition), now)


def on_spec_change(
    state: SchedulerState, dag_id: str, condition_text: str | None, old_text: str = ""
) -> None:
    """The DAG's spec changed (RegisterDags; ``old_text``: its condition before) or it left
    its file (RemoveDags: None): the consumer index is rebuilt at its next use if either
    names assets, and events queued for URIs its condition no longer names are dropped, so
    removed and rewritten DAGs hold no queue forever."""
    if condition_text or old_text:
        state.assets.set_consumer_index(None)
    queued = state.assets.queued(dag_id)
    if not queued:
        return
    names = ac.uris_of(ac.parse(condition_text)) if condition_text else frozenset()
    stale = frozenset(queued) - names
    if stale:
        state.assets.take(dag_id, stale)


def _decide(state: SchedulerState, dag_id: str, condition: Any, now: datetime) -> str:
    """One run of ``dag_id`` if its queued events satisfy ``condition`` (its run id; "" for
    none: not met, paused, or refused, and the events stay queued)."""
    record = state.catalog.get(dag_id)
    if record is None or record.paused:  # the events wait: unpausing, or the next, decides
        return ""
    queued = state.assets.queued(dag_id)
    if not ac.satisfied(condition, frozenset(queued) & ac.uris_of(condition)):
        return ""
    events = sorted((e for evs in queued.values() for e in evs), key=_id)
    run_id = _create_run(state, dag_id, events, now)
    if run_id:
        state.assets.take(dag_id)
    return run_id


def consumers(state: SchedulerState, uri: str) -> list[tuple[str, Any]]:
    """Active DAGs whose asset condition names ``uri``, in catalog order, with it: from the
    table's consumer index, built by one walk of the catalog after a DAG with an asset
    schedule changed (derived, the same on every replica: catalog order)."""
    index = state.assets.consumer_index()
    if index is None:
        built: dict[str, list[tuple[str, Any]]] = {}
        for dag_id, record in state.catalog.records.items():
            text = record.spec.asset_condition
            if text and record.active:
                condition = ac.parse(text)
                for name in sorted(ac.uris_of(condition)):
                    built.setdefault(name, []).append((dag_id, condition))
        state.assets.set_consumer_index(built)
        index = built
    return list(index.get(uri, ()))


def _id(event: AssetEvent) -> int:
    return event.id


def _create_run(state: SchedulerState, dag_id: str, events: list[AssetEvent], now: datetime) -> str:
    """One asset-triggered run of ``dag_id`` carrying ``events`` (its newest MAX_RUN_EVENTS);
    its logical date is ``now``, moved on by microseconds past a taken one (two runs of a DAG
    in one apply; the DB is unique on (dag_id, logical_date))."""
    # here, not at the top: handlers_runs -> validate -> handlers_triggers -> handlers_tasks
    # -> this module
    from raftsched.core.handlers_runs import _create_run as create_run

    logical = now
    for _ in range(1_000):
        if not state.run_table.slot_taken(dag_id, logical, ""):
            break
        logical += timedelta(microseconds=1)
    carried = events[-MAX_RUN_EVENTS:]
    start = min(e.timestamp for e in carried)
    decision = RunDecision(dag_id, logical, start, max(start, logical), RunType.ASSET_TRIGGERED)
    item = create_run(state, decision, now)
    if not item.ok:
        return ""
    run_id = str(item.value)
    rec = state.run_table.get(dag_id, run_id)
    assert rec is not None
    rec.run.asset_events_json = json.dumps(
        [e.to_dict() for e in carried], separators=(",", ":"), ensure_ascii=False
    )
    emit_entry(
        state,
        OutboxKind.ASSET_RUN,
        {"dag_id": dag_id, "run_id": run_id, "event_ids": [e.id for e in events]},
    )
    return run_id


HANDLERS: dict[type, Callable[[Any, Any, datetime, int], Result]] = {
    EmitAssetEvents: apply_emit_asset_events,
}
