"""Equal values of one snapshot written as one object.

pickle writes an object once however often the snapshot refers to it, and reads it back as
one object. A state of 100,000 DAGs repeats the same few strings millions of times (dict
keys, timestamps, states, ids: 3.35 million string objects, 300,000 distinct values), so a
snapshot whose equal strings are one object pickles to half the bytes and unpickles in
two thirds of the time, and the restored state (whose outbox entries are the snapshot's
dicts) holds each string once. Equal task dicts are one dict too (``spec_dicts``).

The values are those of ``DagSpec.to_dict`` and the ``core.snapshot`` record writers,
unchanged: only which equal strings are the same object differs. Nothing of the state is
changed: its dicts (outbox entries) are copied, never rewritten. Only top-level values of a
row are shared; nested user data (a run's conf) is left as it is, so nothing recurses on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from datetime import datetime
from operator import attrgetter
from typing import Any

from raftsched.core.model import DagSpec, OutboxEntry, OutboxKind, TaskSpec, utc_iso

_TASK_VALUES = attrgetter(*(f.name for f in fields(TaskSpec)))
_DAG = OutboxKind.DAG


class SnapshotShare:
    """One snapshot's memo of equal strings (and timestamps' texts)."""

    __slots__ = ("_isos", "_texts")

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._isos: dict[datetime, str] = {}

    def text(self, value: str) -> str:
        return self._texts.setdefault(value, value)

    def iso(self, value: datetime | None) -> str | None:
        """``utc_iso(value)``, one text object per instant."""
        if value is None:
            return None
        found = self._isos.get(value)
        if found is None:  # equal instants in any zone: the same UTC text
            found = self._isos[value] = self.text(utc_iso(value))  # type: ignore[arg-type]
        return found

    def row(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``data`` whose string keys and string values are shared."""
        text = self._texts.setdefault
        return {
            (text(k, k) if type(k) is str else k): (text(v, v) if type(v) is str else v)
            for k, v in data.items()
        }

    def texts(self, values: list[Any]) -> list[Any]:
        text = self._texts.setdefault
        return [text(v, v) if type(v) is str else v for v in values]


def spec_dicts(specs: Mapping[str, DagSpec], share: SnapshotShare) -> dict[str, dict]:
    """The held specs' dicts (``DagSpec.to_dict``) for a snapshot, equal task dicts one
    object. A spec whose tasks were all seen already is converted without them (its tasks'
    dicts are the ones built before): at 100,000 DAGs from a few templates, ``to_dict`` of
    every task was most of a snapshot's time."""
    by_id: dict[int, dict] = {}  # the specs (and so their tasks) live through the snapshot
    by_value: dict[Any, dict] = {}
    out: dict[str, dict] = {}
    for spec_hash, spec in specs.items():
        known = [_known_task(task, by_id, by_value) for task in spec.tasks]
        if spec.tasks and None not in known:
            data = _top(replace(spec, tasks=()).to_dict(), share)
            data["tasks"] = known
        else:
            data = _top(spec.to_dict(), share)
            data["tasks"] = [
                _remember_task(task, item, by_id, by_value, share)
                for task, item in zip(spec.tasks, data["tasks"], strict=True)
            ]
        out[share.text(spec_hash)] = data
    return out


def _top(data: dict[str, Any], share: SnapshotShare) -> dict[str, Any]:
    data = share.row(data)
    schedule = data.get("schedule")
    if type(schedule) is dict:
        data["schedule"] = share.row(schedule)
    if type(data.get("tags")) is list:
        data["tags"] = share.texts(data["tags"])
    return data


def _task_key(task: TaskSpec) -> Any:
    """Tells tasks apart whose dicts could differ: equal values of another type (1, True)
    or another text (0.0, -0.0) are other keys."""
    values = _TASK_VALUES(task)
    return values, tuple(map(type, values)), tuple([repr(v) for v in values if type(v) is float])


def _known_task(task: TaskSpec, by_id: dict[int, dict], by_value: dict[Any, dict]) -> Any:
    found = by_id.get(id(task))
    if found is None:
        found = by_value.get(_task_key(task))
        if found is not None:
            by_id[id(task)] = found
    return found


def _remember_task(
    task: TaskSpec,
    item: dict[str, Any],
    by_id: dict[int, dict],
    by_value: dict[Any, dict],
    share: SnapshotShare,
) -> dict[str, Any]:
    found = _known_task(task, by_id, by_value)
    if found is None:
        found = share.row(item)
        if type(found.get("upstream")) is list:
            found["upstream"] = share.texts(found["upstream"])
        by_id[id(task)] = by_value[_task_key(task)] = found
    return found


def outbox_entries(
    entries: Iterable[OutboxEntry], specs: Mapping[str, dict], share: SnapshotShare
) -> list[list]:
    """The outbox's entries for a snapshot, each data dict a copy with shared strings. A DAG
    row's spec equal to a held spec's dict (of :func:`spec_dicts`) is that very dict: written
    once, one object again once restored (each DAG row holds its spec: at 100,000 DAGs, half
    the snapshot). Same values either way."""
    out: list[list] = []
    row = share.row
    for entry in entries:
        data = row(entry.data)
        if entry.kind is _DAG:
            shared = specs.get(data.get("spec_hash", ""))
            if shared is not None and shared == data.get("spec"):
                data["spec"] = shared
        out.append([entry.seq, entry.kind.value, data])
    return out
