"""Asset event commands and their checks (docs/architecture.md §21; the handlers are in
``core/handlers_assets.py``). Never move or rename a class here: pickled by module path.

An event enters the state two ways, each a committed entry: a successful attempt of a task
with ``outlets`` (:func:`on_task_success`, called by CompleteAttempt's apply: the events are
in the same apply as the outcome), and :class:`EmitAssetEvents` from outside (the CLI's
``assets event``, ``POST /api/v1/assets/events``). Each event is queued for every active DAG
whose ``asset_condition`` names its URI; when a DAG's queued URIs satisfy its condition, the
same apply creates one run of it (run type ``asset_triggered``) carrying the queued events,
and empties its queue. So no failover can separate an event from the run it makes, and a
client event id seen before answers with its first event and makes nothing new.

Only from cluster version 3 (the release that introduced assets, a fixed fact): the gate
refuses the command and any spec with assets before that; the handlers check it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raftsched.core import asset_condition as ac
from raftsched.core import limits as lim
from raftsched.core.commands import Command
from raftsched.errors import LimitExceeded

SINCE_RELEASE = 3  # the release (0.3.0) that introduced assets: a fixed fact
MAX_EVENTS_PER_COMMAND = 100
MAX_RUN_EVENTS = 16  # the newest queued events a run carries (each extra <= 4 KiB)
MAX_KEY_CHARS = 200  # a client's event id
MAX_ACTOR_CHARS = 200

NOT_YET = "assets_need_release_3"  # the cluster version is below 3
TOO_MANY_ASSETS = "too_many_assets"
DUPLICATE_EVENT = "duplicate_event"  # ok: the client event id made an event before


@dataclass(frozen=True, slots=True)
class AssetEventIn:
    """An event from outside: ``key`` is the client's event id ("" for none)."""

    uri: str
    extra_json: str = "{}"
    key: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class EmitAssetEvents(Command):
    """Asset events from outside (CLI, REST): each item's value is {"event_id", "runs"},
    runs as (dag_id, run_id) pairs."""

    events: tuple[AssetEventIn, ...] = ()
    actor: str = ""


# -- checks (core.validate registers them) ----------------------------------------------------


def _check_emit(cmd: EmitAssetEvents) -> None:
    if not isinstance(cmd.events, tuple):
        raise LimitExceeded("events", "must be a tuple")
    lim.check_count("events", len(cmd.events), MAX_EVENTS_PER_COMMAND)
    if not cmd.events:
        raise LimitExceeded("events", "must name at least one event")
    for i, ev in enumerate(cmd.events):
        if not isinstance(ev, AssetEventIn):
            raise LimitExceeded(f"events[{i}]", "must be an AssetEventIn")
        ac.check_uri(f"events[{i}].uri", ev.uri)
        ac.check_extra(f"events[{i}].extra", ev.extra_json)
        lim.check_text(f"events[{i}].key", ev.key, MAX_KEY_CHARS)
        if any(ch < " " for ch in ev.key):
            raise LimitExceeded(f"events[{i}].key", "contains a control character")
    lim.check_text("actor", cmd.actor, MAX_ACTOR_CHARS)


CHECKS: dict[type, Callable[[Any], None]] = {EmitAssetEvents: _check_emit}
