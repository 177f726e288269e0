"""The asset table: assets' recent events, the events each consumer DAG has queued, and the
client event ids seen (docs/architecture.md §21).

Owns: the last event id given (ids are 1, 2, 3, ... across the cluster's life); per asset URI
its newest ``MAX_EVENTS_KEPT`` events and its event count; per consumer DAG the events queued
for it since its last asset-triggered run (per URI, the newest ``MAX_EVENTS_KEPT``); the newest
``MAX_EVENT_KEYS`` client event ids with the event each made. Guarantees: at most
``MAX_ASSETS`` URIs are held (:meth:`room_for` says whether a new one fits); an event id is
given once; a client event id maps to one event while remembered. Every entity's fingerprint
is in the shared digest sum exactly while held, and the table joins the snapshot only once it
holds an event, so a cluster without assets digests and snapshots as before. The DB holds
every event (ASSET_EVENT outbox entries). Raises nothing on what the handlers pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from raftsched.core import digest as dg
from raftsched.core.model import parse_utc, utc_iso

MAX_ASSETS = 10_000  # URIs with events held in the state (all are in the DB)
MAX_EVENTS_KEPT = 100  # per asset, and per consumer DAG and asset
MAX_EVENT_KEYS = 10_000  # client event ids remembered (a retried POST makes no second event)


@dataclass(frozen=True, slots=True)
class AssetEvent:
    """One committed asset event. A task's names its attempt (``source_*``); one from outside
    names the caller (``actor``) and the client's event id (``key``, "" for none)."""

    id: int
    uri: str
    extra_json: str
    timestamp: datetime
    source_dag_id: str = ""
    source_run_id: str = ""
    source_task_id: str = ""
    source_try: int = 0
    key: str = ""
    actor: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["timestamp"] = utc_iso(self.timestamp)
        return data

    def to_list(self) -> list[Any]:
        return list(self.to_dict().values())

    @classmethod
    def from_list(cls, items: list[Any]) -> AssetEvent:
        data = dict(zip(_FIELDS, items, strict=True))
        data["timestamp"] = parse_utc(data["timestamp"])
        return cls(**data)


_FIELDS = tuple(AssetEvent.__dataclass_fields__)


def fp_event(event: AssetEvent) -> str:
    return "asset_event:" + dg.canonical(event)


def _fp_count(uri: str, count: int) -> str:
    return "asset:" + dg.canonical((uri, count))


def _fp_queued(dag_id: str, uri: str, ids: tuple[int, ...]) -> str:
    return "asset_queued:" + dg.canonical((dag_id, uri, ids))


def _fp_key(key: str, event_id: int) -> str:
    return "asset_key:" + dg.canonical((key, event_id))


def _fp_seq(seq: int) -> str:
    return f"asset_seq:{seq}"


class AssetTable:
    __slots__ = ("_counts", "_events", "_index", "_keys", "_queued", "_seq", "_sum")

    def __init__(self, digest_sum: dg.DigestSum) -> None:
        self._sum = digest_sum
        self._seq = 0
        self._events: dict[str, list[AssetEvent]] = {}
        self._counts: dict[str, int] = {}
        self._queued: dict[str, dict[str, list[AssetEvent]]] = {}
        self._keys: dict[str, int] = {}  # insertion order: the oldest leaves first
        # Derived, not digested: URI -> its consumers (handlers_assets.consumers); None: to
        # be rebuilt from the catalog (a DAG with an asset schedule changed, or a restore)
        self._index: dict[str, list[tuple[str, Any]]] | None = None

    def __bool__(self) -> bool:
        return self._seq > 0

    # -- reads ------------------------------------------------------------------------------

    def uris(self) -> Iterator[str]:
        return iter(self._events)

    def events(self, uri: str) -> tuple[AssetEvent, ...]:
        return tuple(self._events.get(uri, ()))

    def count(self, uri: str) -> int:
        return self._counts.get(uri, 0)

    def event_for_key(self, key: str) -> int | None:
        return self._keys.get(key)

    def queued(self, dag_id: str) -> dict[str, tuple[AssetEvent, ...]]:
        return {uri: tuple(evs) for uri, evs in self._queued.get(dag_id, {}).items()}

    def consumer_index(self) -> dict[str, list[tuple[str, Any]]] | None:
        return self._index

    def set_consumer_index(self, index: dict[str, list[tuple[str, Any]]] | None) -> None:
        self._index = index

    def room_for(self, uri: str) -> bool:
        return uri in self._events or len(self._events) < MAX_ASSETS

    # -- changes ----------------------------------------------------------------------------

    def next_id(self) -> int:
        return self._seq + 1

    def add(self, event: AssetEvent) -> None:
        """Hold a new event (its id is :meth:`next_id`; the caller checked room_for)."""
        if self._seq:
            self._sum.remove(_fp_seq(self._seq))
        self._seq = event.id
        self._sum.add(_fp_seq(self._seq))
        kept = self._events.setdefault(event.uri, [])
        kept.append(event)
        self._sum.add(fp_event(event))
        if len(kept) > MAX_EVENTS_KEPT:
            self._sum.remove(fp_event(kept.pop(0)))
        old = self._counts.get(event.uri, 0)
        if old:
            self._sum.remove(_fp_count(event.uri, old))
        self._counts[event.uri] = old + 1
        self._sum.add(_fp_count(event.uri, old + 1))
        if event.key:
            self._keys[event.key] = event.id
            self._sum.add(_fp_key(event.key, event.id))
            if len(self._keys) > MAX_EVENT_KEYS:
                oldest = next(iter(self._keys))
                self._sum.remove(_fp_key(oldest, self._keys.pop(oldest)))

    def queue(self, dag_id: str, event: AssetEvent) -> None:
        """Queue ``event`` for the consumer ``dag_id`` (the newest MAX_EVENTS_KEPT stay)."""
        by_uri = self._queued.setdefault(dag_id, {})
        evs = by_uri.setdefault(event.uri, [])
        if evs:
            self._sum.remove(_fp_queued(dag_id, event.uri, tuple(e.id for e in evs)))
        evs.append(event)
        if len(evs) > MAX_EVENTS_KEPT:
            evs.pop(0)
        self._sum.add(_fp_queued(dag_id, event.uri, tuple(e.id for e in evs)))

    def take(self, dag_id: str, uris: frozenset[str] | None = None) -> list[AssetEvent]:
        """Drop what ``dag_id`` has queued for ``uris`` (None: all) and return it, oldest
        first (Airflow clears a consumer's whole queue when it makes a run)."""
        by_uri = self._queued.get(dag_id, {})
        out: list[AssetEvent] = []
        for uri in [u for u in by_uri if uris is None or u in uris]:
            evs = by_uri.pop(uri)
            self._sum.remove(_fp_queued(dag_id, uri, tuple(e.id for e in evs)))
            out.extend(evs)
        if not by_uri:
            self._queued.pop(dag_id, None)
        out.sort(key=lambda e: e.id)
        return out

    # -- digest and snapshot ----------------------------------------------------------------

    def fingerprints(self) -> Iterator[str]:
        if self._seq:
            yield _fp_seq(self._seq)
        for uri, evs in self._events.items():
            yield _fp_count(uri, self._counts[uri])
            yield from (fp_event(e) for e in evs)
        for dag_id, by_uri in self._queued.items():
            for uri, evs in by_uri.items():
                yield _fp_queued(dag_id, uri, tuple(e.id for e in evs))
        for key, event_id in self._keys.items():
            yield _fp_key(key, event_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self._seq,
            "assets": [
                [uri, self._counts[uri], [e.to_list() for e in evs]]
                for uri, evs in self._events.items()
            ],
            "queued": [
                [dag_id, uri, [e.to_list() for e in evs]]
                for dag_id, by_uri in self._queued.items()
                for uri, evs in by_uri.items()
            ],
            "keys": [[key, event_id] for key, event_id in self._keys.items()],
        }

    def load(self, data: Any) -> None:
        """Restore (a snapshot's ``assets``, or None); the caller recomputes the digest."""
        if not data:
            return
        self._seq = int(data["seq"])
        for uri, count, evs in data["assets"]:
            self._events[uri] = [AssetEvent.from_list(items) for items in evs]
            self._counts[uri] = int(count)
        for dag_id, uri, evs in data["queued"]:
            self._queued.setdefault(dag_id, {})[uri] = [AssetEvent.from_list(i) for i in evs]
        self._keys = {str(key): int(event_id) for key, event_id in data["keys"]}
