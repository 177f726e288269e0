"""Assets in DAG files (docs/architecture.md §21): ``Asset("s3://bucket/key")`` (``Dataset``
is Airflow 2's name), a task's ``outlets=[...]`` and ``inlets=[...]``, and a DAG's
``schedule=[a, b]`` (all of them), ``a | b`` (AssetAny), ``a & b`` (AssetAll), nested.

A DAG file only declares: the parser turns these into URIs (``TaskSpec.outlets``/``inlets``)
and a condition (``DagSpec.asset_condition``, core/asset_condition.py), and the cluster
decides every event and run. Checked here with the core's bounds, so a bad URI is an import
error of its file naming it.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from raftsched.core import asset_condition as ac
from raftsched.errors import DagDefinitionError, LimitExceeded

# An asset-triggered run's events (JSON text) in its attempts' environment (the worker sets it)
ASSET_EVENTS_ENV = "RAFTSCHED_ASSET_EVENTS"


class _Condition:
    """What ``|`` and ``&`` combine."""

    def __or__(self, other: object) -> AssetAny:
        return AssetAny(self, _operand(other))

    def __and__(self, other: object) -> AssetAll:
        return AssetAll(self, _operand(other))

    def as_condition(self) -> Any:  # the JSON value of core/asset_condition.py
        raise NotImplementedError


class Asset(_Condition):
    """A named piece of data. ``uri``: printable ASCII without spaces, at most 1,000
    characters (``s3://bucket/key``, ``file:///data/x.csv``, or a plain name). ``extra`` is
    kept for Airflow's signature; events carry their own extra. ``watchers``: a list of
    :class:`AssetWatcher`, registered by a DAG scheduled on this asset."""

    def __init__(
        self,
        uri: str | None = None,
        *,
        name: str | None = None,
        extra: Mapping[str, Any] | None = None,
        group: str = "asset",
        watchers: Any = None,
    ) -> None:
        value = uri if uri is not None else name
        self.watchers = list(watchers or [])
        for watcher in self.watchers:
            if not isinstance(watcher, AssetWatcher):
                raise DagDefinitionError(
                    f"Asset({value!r}, watchers=...): expected AssetWatcher(name, trigger),"
                    f" got {watcher!r}"
                )
        try:
            self.uri = ac.check_uri("asset URI", value)
        except LimitExceeded as err:
            raise DagDefinitionError(f"Asset({value!r}): {err}") from None
        self.name = name or self.uri
        self.extra = dict(extra or {})
        self.group = group

    def as_condition(self) -> Any:
        return self.uri

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Asset) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __repr__(self) -> str:
        return f"Asset({self.uri!r})"


Dataset = Asset  # Airflow 2's name


class AssetAll(_Condition):
    """Every one of the assets (or conditions) has a new event."""

    op = ac.ALL

    def __init__(self, *objects: object) -> None:
        if not objects:
            raise DagDefinitionError(f"{type(self).__name__}() needs at least one asset")
        self.objects = [_operand(o) for o in objects]

    def as_condition(self) -> Any:
        return {self.op: [o.as_condition() for o in self.objects]}


class AssetAny(AssetAll):
    """Any one of the assets (or conditions) has a new event."""

    op = ac.ANY


DatasetAll, DatasetAny = AssetAll, AssetAny


def _operand(value: object) -> _Condition:
    if isinstance(value, str):
        return Asset(value)
    if isinstance(value, _Condition):
        return value
    raise DagDefinitionError(f"expected an Asset, AssetAll or AssetAny, got {value!r}")


class AssetWatcher:
    """A trigger bound to an asset (Airflow 3): each time ``trigger`` fires (run by a
    ``raftsched triggerer``), the cluster commits one event of the asset, then runs the
    trigger again. ``trigger``: a built-in trigger (``raftsched.dags.deferral``: a
    ``FileTrigger`` fires once per new version of its file) or a user-defined one."""

    def __init__(self, name: str, trigger: Any) -> None:
        if not hasattr(trigger, "kind") or not callable(getattr(trigger, "args", None)):
            raise DagDefinitionError(
                f"AssetWatcher({name!r}): the trigger must be a raftsched trigger (FileTrigger,"
                f" HttpTrigger, ... or a BaseTrigger subclass), got {trigger!r}"
            )
        self.name = name
        self.trigger = trigger

    def as_spec(self, uri: str) -> tuple[str, str, str, str]:
        args = json.dumps(self.trigger.args(), sort_keys=True, separators=(",", ":"))
        return (uri, self.name, str(self.trigger.kind), args)

    def __repr__(self) -> str:
        return f"AssetWatcher({self.name!r}, {self.trigger!r})"


def watchers_json(schedule: object, dag_id: str) -> str:
    """The DagSpec's ``asset_watchers`` of an asset schedule: the watchers of its assets."""
    from raftsched.core import asset_watchers as aw

    found: dict[tuple[str, str], tuple[str, str, str, str]] = {}
    stack = list(schedule) if isinstance(schedule, list | tuple) else [schedule]
    while stack:
        item = stack.pop()
        if isinstance(item, AssetAll):
            stack.extend(item.objects)
        elif isinstance(item, Asset):
            for watcher in item.watchers:
                try:
                    spec = watcher.as_spec(item.uri)
                except (TypeError, ValueError) as err:
                    raise DagDefinitionError(f"{watcher!r}: {err}", dag_id=dag_id) from None
                found[(spec[0], spec[1])] = spec
    if not found:
        return ""
    text = aw.canonical_json(list(found.values()))
    uris = frozenset(ac.uris_of(ac.parse(condition_json(schedule, dag_id))))
    try:
        aw.check("asset watchers", text, uris)
    except LimitExceeded as err:
        raise DagDefinitionError(f"DAG {dag_id!r}: {err}", dag_id=dag_id) from None
    return text


def is_asset_schedule(schedule: object) -> bool:
    """``schedule`` names assets (an Asset, a condition, or a non-empty list of them)."""
    if isinstance(schedule, _Condition):
        return True
    if isinstance(schedule, list | tuple) and schedule:
        return all(isinstance(item, _Condition) for item in schedule)
    return False


def condition_json(schedule: object, dag_id: str) -> str:
    """The DagSpec's ``asset_condition`` of an asset schedule (a list means all of them)."""
    node = (
        AssetAll(*schedule) if isinstance(schedule, list | tuple) else _operand(schedule)
    ).as_condition()
    text = ac.canonical_json(node)
    try:
        ac.check_condition("schedule", text)
    except LimitExceeded as err:
        raise DagDefinitionError(f"schedule of DAG {dag_id!r}: {err}", dag_id=dag_id) from None
    return text


def uris(values: object, what: str, **ids: str) -> tuple[str, ...]:
    """A task's ``outlets``/``inlets`` as URIs (Assets or URI strings; other objects, such as
    Airflow lineage entities, are not assets and are left out)."""
    if values is None:
        return ()
    items = [values] if isinstance(values, Asset | str) else values
    if not isinstance(items, Iterable):
        raise DagDefinitionError(f"{what} must be a list of Assets", **ids)
    out: dict[str, None] = {}
    for item in items:
        if isinstance(item, str | Asset):
            out[_operand(item).as_condition()] = None
    if len(out) > ac.MAX_ASSETS_PER_DAG:
        raise DagDefinitionError(f"{what} names more than {ac.MAX_ASSETS_PER_DAG} assets", **ids)
    return tuple(out)


def triggering_events(text: str) -> dict[str, list[dict[str, Any]]]:
    """An asset-triggered run's events (its lease's JSON text) by URI, oldest first, each
    {id, uri, extra (a dict), timestamp, source_dag_id, source_run_id, source_task_id,
    source_try, event_id}: the context's ``triggering_asset_events`` (Airflow's name; in
    templates ``{{ triggering_asset_events['s3://x'][0].extra }}``). {} for other runs."""
    import json

    out: dict[str, list[dict[str, Any]]] = {}
    for event in json.loads(text) if text else ():
        item = {k: v for k, v in event.items() if k not in ("extra_json", "key", "actor")}
        item["extra"] = json.loads(event.get("extra_json") or "{}")
        item["event_id"] = event.get("key", "")
        out.setdefault(event["uri"], []).append(item)
    return out


# -- a task's outlet events (Airflow's outlet_events and Metadata) ------------------------------


class Metadata:
    """What a task generator yields to give its outlet's event an extra (Airflow's
    ``Metadata(asset, extra)``): merged into ``outlet_events[asset].extra``."""

    def __init__(
        self,
        asset: Asset | str,
        extra: Mapping[str, Any] | None = None,
        alias: Any = None,
    ) -> None:
        if alias is not None:
            raise NotImplementedError(
                "Metadata(alias=...): asset aliases are not supported yet; name the asset"
            )
        self.asset = _operand(asset)
        if not isinstance(self.asset, Asset):
            raise TypeError(f"Metadata needs an Asset, got {asset!r}")
        self.uri = self.asset.uri
        self.extra = dict(extra or {})

    def __repr__(self) -> str:
        return f"Metadata({self.uri!r}, extra={self.extra!r})"


class OutletEventAccessor:
    """One outlet's event as the task sees it: ``extra``, a dict the event will carry."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.extra: dict[str, Any] = {}

    @property
    def key(self) -> Asset:
        return Asset(self.uri)

    def __repr__(self) -> str:
        return f"OutletEventAccessor({self.uri!r}, extra={self.extra!r})"


class OutletEventAccessors(Mapping[Any, OutletEventAccessor]):
    """The context's ``outlet_events``: ``outlet_events[asset].extra = {...}`` (an Asset or
    its URI) sets the extra of the event a successful attempt emits of that outlet. An asset
    that is not an outlet of the task emits no event: its extra is dropped with a warning."""

    def __init__(self, outlets: Iterable[str] = ()) -> None:
        self.outlets = tuple(outlets)
        self._events: dict[str, OutletEventAccessor] = {}

    def __getitem__(self, key: Any) -> OutletEventAccessor:
        uri = key if isinstance(key, str) else getattr(key, "uri", None)
        if not isinstance(uri, str):
            raise KeyError(key)
        if uri not in self._events:
            self._events[uri] = OutletEventAccessor(uri)
        return self._events[uri]

    def __iter__(self) -> Any:
        return iter(Asset(uri) for uri in self._events)

    def __len__(self) -> int:
        return len(self._events)

    def add_metadata(self, metadata: Metadata) -> None:
        self[metadata.uri].extra.update(metadata.extra)

    def extras_json(self) -> dict[str, str]:
        """Each declared outlet's non-empty extra as compact JSON text (the result file's
        ``outlet_extras``). Raises XComError for an extra that is not JSON-serializable or
        past the core's bounds (4 KiB each, 64 KiB in all)."""
        from raftsched.errors import XComError

        out: dict[str, str] = {}
        for uri, event in self._events.items():
            if not event.extra:
                continue
            if uri not in self.outlets:
                print(
                    f"raftsched: outlet_events[{uri!r}]: not an outlet of this task; its extra"
                    " is dropped (only outlets= assets get an event)",
                    file=sys.stderr,
                )
                continue
            if not isinstance(event.extra, Mapping):
                raise XComError(f"outlet_events[{uri!r}].extra must be a dict")
            try:
                out[uri] = json.dumps(
                    dict(event.extra), separators=(",", ":"), allow_nan=False, ensure_ascii=False
                )
            except (TypeError, ValueError, RecursionError) as err:
                raise XComError(
                    f"outlet_events[{uri!r}].extra is not JSON-serializable: {str(err)[:200]}"
                ) from None
        try:
            ac.check_outlet_extras("outlet_events extras", tuple(sorted(out.items())))
        except LimitExceeded as err:
            raise XComError(str(err)) from None
        return out


_outlet_events: list[OutletEventAccessors] = []  # the running attempt's (one per process)


def new_outlet_events(outlets: Iterable[str]) -> OutletEventAccessors:
    """The attempt's ``outlet_events`` (a new attempt forgets an earlier one's)."""
    _outlet_events[:] = [OutletEventAccessors(outlets)]
    return _outlet_events[0]


def outlet_extras_json() -> dict[str, str]:
    """What the running attempt set for its outlets' events ({} for nothing)."""
    return _outlet_events[0].extras_json() if _outlet_events else {}


def consume_metadata(value: Any) -> Any:
    """A task's return value; a generator is run to its end first, each :class:`Metadata` it
    yields merged into ``outlet_events`` (as Airflow does), and its return value returned."""
    if not inspect.isgenerator(value):
        return value
    events = _outlet_events[0] if _outlet_events else new_outlet_events(())
    result: list[Any] = [None]

    def run() -> Any:
        result[0] = yield from value

    for item in run():
        if isinstance(item, Metadata):
            events.add_metadata(item)
        else:
            print(f"raftsched: ignoring {type(item).__name__} yielded by the task", file=sys.stderr)
    return result[0]
