"""Asset watchers: a trigger bound to an asset, whose firing is an asset event (Airflow 3's
``Asset(..., watchers=[AssetWatcher(name, trigger)])``; docs/architecture.md §21).

A DAG declares watchers on the assets of its schedule: ``DagSpec.asset_watchers``, canonical
JSON of ``[[uri, name, kind, args_json], ...]`` sorted by (uri, name), at most
:data:`MAX_WATCHERS_PER_DAG`. The apply that registers the spec holds one trigger per watcher
in the trigger table (``core/trigger_table``), under the key (DAG, :data:`WATCHER_RUN_ID`,
name): leased to triggerers, renewed, fenced and timed exactly as a deferred task's, with
``method_name`` :data:`WATCHER_METHOD` and the asset's URI as ``kwargs_json``. The apply that
changes or removes the spec drops the watchers it no longer declares.

A firing (``FireTriggers``, under the live lease's token) is one asset event of the URI in
its own apply (its extra ``{"from_trigger": true, "payload": <event>}``, as Airflow's) and
re-arms the watcher: the trigger is replaced by an unleased one (token 0), so the firing's
lease is gone and a repeat or a stale triggerer's firing is refused: one event per firing,
also when a triggerer dies after its firing committed. A file watcher's next trigger carries
the file's identity (``after``): it fires again only for another version of the file. A
trigger that raises emits nothing and is re-armed after :data:`ERROR_PAUSE_SECONDS`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from raftsched.core import asset_condition as ac
from raftsched.core import limits as lim
from raftsched.core.asset_commands import SINCE_RELEASE
from raftsched.core.model import TaskKey
from raftsched.core.trigger_table import Trigger
from raftsched.errors import LimitExceeded

WATCHER_RUN_ID = "__asset_watcher__"  # the run id of a watcher's trigger key: no run's id
WATCHER_METHOD = "__asset_watcher__"  # its method_name: no task resumes
MAX_WATCHERS_PER_DAG = 10
MAX_WATCHER_ARGS_BYTES = 16_384  # a trigger's arguments (as a deferral's)
MAX_WATCHER_KIND_CHARS = 300
MAX_WATCHERS_JSON_CHARS = MAX_WATCHERS_PER_DAG * (
    MAX_WATCHER_ARGS_BYTES + ac.MAX_URI_CHARS + lim.MAX_ID_CHARS + MAX_WATCHER_KIND_CHARS + 32
)
ERROR_PAUSE_SECONDS = 30.0  # a watcher whose trigger raised is leased again after this
MAX_IDENTITY_CHARS = 200  # a file watcher's "after"
FROM_TRIGGER = '{"from_trigger":true}'

Watcher = tuple[str, str, str, str]  # (uri, name, kind, args_json)


def parse(text: str) -> tuple[Watcher, ...]:
    """The watchers of checked ``asset_watchers`` text ("" for none)."""
    return tuple(tuple(w) for w in json.loads(text)) if text else ()  # type: ignore[misc]


def canonical_json(watchers: list[Watcher]) -> str:
    return json.dumps(sorted(watchers), separators=(",", ":"), ensure_ascii=False)


def check(field: str, text: object, condition_uris: frozenset[str]) -> tuple[Watcher, ...]:
    """``asset_watchers`` text: at most MAX_WATCHERS_PER_DAG [uri, name, kind, args_json]
    items sorted by (uri, name), each (uri, name) once, each URI one of the DAG's schedule
    (``condition_uris``), the name an id, the kind a trigger kind, the args a JSON object of
    at most 16 KiB and 16 levels."""
    lim.check_text(field, text, MAX_WATCHERS_JSON_CHARS)
    assert isinstance(text, str)
    if not text:
        return ()
    if lim._bracket_depth(text) > 20:
        raise LimitExceeded(field, "is nested too deeply")
    try:
        items = lim.loads_json(text)
    except (ValueError, RecursionError) as err:
        raise LimitExceeded(field, f"is not valid JSON ({str(err)[:200]})") from None
    if not isinstance(items, list) or not items:
        raise LimitExceeded(field, "must be a non-empty JSON list")
    lim.check_count(field, len(items), MAX_WATCHERS_PER_DAG)
    out: list[Watcher] = []
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        if not isinstance(item, list) or len(item) != 4:
            raise LimitExceeded(where, "must be [uri, name, kind, args_json]")
        uri = ac.check_uri(f"{where}.uri", item[0])
        if uri not in condition_uris:
            raise LimitExceeded(f"{where}.uri", "must be an asset of the DAG's schedule")
        name = lim.check_id(f"{where}.name", item[1])
        kind = lim.check_text(f"{where}.kind", item[2], MAX_WATCHER_KIND_CHARS, empty=False)
        if not all(ch.isalnum() or ch in "_.:-" for ch in kind):
            raise LimitExceeded(f"{where}.kind", "may hold letters, digits and _ . : - only")
        args = lim.check_text(f"{where}.args_json", item[3], MAX_WATCHER_ARGS_BYTES)
        if lim._bracket_depth(args) > 16:
            raise LimitExceeded(f"{where}.args_json", "is nested deeper than 16 levels")
        try:
            value = lim.loads_json(args)
        except (ValueError, RecursionError) as err:
            raise LimitExceeded(f"{where}.args_json", f"is not JSON ({str(err)[:200]})") from None
        if not isinstance(value, dict):
            raise LimitExceeded(f"{where}.args_json", "must be a JSON object")
        out.append((uri, name, kind, args))
    keys = [(w[0], w[1]) for w in out]
    if keys != sorted(set(keys)):
        raise LimitExceeded(field, "must be sorted by (uri, name), each once")
    if len({w[1] for w in out}) != len(out):
        raise LimitExceeded(field, "names a watcher twice")
    return tuple(out)


def is_watcher(trigger: Trigger) -> bool:
    return trigger.run_id == WATCHER_RUN_ID and trigger.method_name == WATCHER_METHOD


def _parse_or_none(text: str) -> tuple[Watcher, ...]:
    """The watchers of ``text``, leaving out what is not four strings (the text was checked
    before apply: this only keeps a hostile one from breaking it)."""
    try:
        items = parse(text)
    except (ValueError, TypeError, RecursionError):
        return ()
    return tuple(w for w in items if len(w) == 4 and all(isinstance(x, str) for x in w))


def sync(
    state: Any, dag_id: str, old_text: str, new_text: str, fileloc: str, now: datetime
) -> None:
    """The DAG's watchers went from ``old_text`` to ``new_text`` (its spec registered,
    changed, or removed: ""): drop the watchers it no longer declares (or declares with
    another trigger), hold a trigger for each new one (while the trigger table has room)."""
    if old_text == new_text:
        return
    old = {w[1]: w for w in _parse_or_none(old_text)}
    new = {w[1]: w for w in _parse_or_none(new_text)}
    for name, watcher in old.items():
        if new.get(name) != watcher:
            state.triggers.drop(TaskKey(dag_id, WATCHER_RUN_ID, name))
    for name, watcher in new.items():
        key = TaskKey(dag_id, WATCHER_RUN_ID, name)
        if state.triggers.get(key) is None and state.triggers.room_for(dag_id):
            state.triggers.add(trigger_of(dag_id, watcher, fileloc, now))


def trigger_of(dag_id: str, watcher: Watcher, fileloc: str, now: datetime) -> Trigger:
    """The unleased trigger of ``dag_id``'s ``watcher``."""
    uri, name, kind, args = watcher
    if kind == "file":  # fires for a version of the file other than "after" ("": any)
        args = _with_after(args, "")
    return Trigger(
        dag_id=dag_id,
        run_id=WATCHER_RUN_ID,
        task_id=name,
        try_number=0,
        kind=kind,
        args_json=args,
        method_name=WATCHER_METHOD,
        kwargs_json=uri,
        fileloc=fileloc,
        created_at=now,
    )


def _with_after(args_json: str, identity: str) -> str:
    try:
        args = json.loads(args_json)
    except (ValueError, RecursionError):
        return args_json
    if not isinstance(args, dict):
        return args_json
    args["after"] = identity
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fire(
    state: Any, trigger: Trigger, event_json: str, error: str, now: datetime
) -> tuple[int, tuple[tuple[str, str], ...]]:
    """A watcher's firing under its current lease (the caller checked it): its asset event
    (none for an ``error``) and its re-armed trigger. Returns (event id, runs made)."""
    from raftsched.core.handlers_assets import emit  # handlers_assets -> ... -> triggers

    uri = trigger.kwargs_json
    event_id, runs = 0, ()
    args, pause = trigger.args_json, None
    if error:
        pause = now + timedelta(seconds=ERROR_PAUSE_SECONDS)
    else:
        extra = '{"from_trigger":true,"payload":' + event_json + "}"
        try:
            ac.check_extra("extra", extra)
        except LimitExceeded:
            extra = FROM_TRIGGER  # a payload past an extra's bounds: the event alone
        if state.cluster_version >= SINCE_RELEASE and state.assets.room_for(uri):
            event_id, runs = emit(state, [uri], extra, now, actor=f"watcher {trigger.task_id}")
        if trigger.kind == "file":
            args = _with_after(args, _identity(event_json))
    state.triggers.drop(trigger.key)
    rearmed = replace(
        trigger, args_json=args, created_at=now, triggerer_id="", token=0, expires_at=pause
    )
    state.triggers.add(rearmed)
    return event_id, runs


def _identity(event_json: str) -> str:
    """A file trigger's event's ``identity`` ("" when it has none)."""
    try:
        event: Any = json.loads(event_json)
    except (ValueError, RecursionError):
        return ""
    identity = event.get("identity") if isinstance(event, dict) else None
    if isinstance(identity, str) and len(identity) <= MAX_IDENTITY_CHARS:
        return identity
    return ""
