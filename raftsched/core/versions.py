"""Releases and the cluster version: what a mixed cluster may commit (docs/architecture.md §12).

Each release of raftsched has a protocol number, :data:`RELEASE` (0.1.0 is 1, 0.2.0 is 2).
The replicated state holds the committed ``cluster_version``: the newest release whose
commands every node can apply. It starts at :data:`BASELINE_RELEASE` and is raised by one
``SetClusterVersion`` command, which the leader proposes only once every member reported a
release at least that new (``cluster/versions.py``). Until then the cluster is *mixed*: a
node of the previous release may apply any entry, so nothing may enter the log that it would
not apply exactly as this release does.

- :func:`refusal` is that gate, applied by ``SchedulerNode.submit`` to every proposal of
  this node (API calls, the leader loop, the materializer). While ``cluster_version`` is
  older than this release it refuses a command that holds a class release 1 does not have
  (it could not unpickle it: its tick thread would stop at that entry), a field release 1
  does not have at a non-default value (an old node unpickles a slots dataclass by zipping
  its fields and silently drops trailing unknown ones: it would apply something else), an
  enum value it does not know, or a value outside a release-1 vocabulary
  (:data:`BASELINE_VALUES`). So a feature added by a later release is refused until the
  upgrade is finished, whoever wrote it, without code of its own here. The baseline is data
  taken from release 1's source (:mod:`raftsched.core.versions_baseline`).
- :func:`install_tolerant_unpickling` is the other direction: an entry pickled by an older
  release lacks the fields added since; Python's own ``__setstate__`` of a frozen slots
  dataclass would leave them unset (AttributeError at first use, so this release would
  refuse or halt on an entry the old one applied). Fields missing at the end take their
  defaults instead.

What the gate cannot see: a change of meaning of a value release 1 already accepts (a looser
limit, another result for the same command). Such a change must be written to depend on
``state.cluster_version`` explicitly (and be added to :data:`BASELINE_VALUES` when it is a
new value of an existing field).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta
from enum import Enum
from types import ModuleType
from typing import Any

from raftsched.core import persisted
from raftsched.core import versions_baseline as baseline
from raftsched.core.results import Result

RELEASE = 2  # this release's protocol number
# Protocol number -> the raftsched version that introduced it (raftsched.__version__ is the
# last one; tests/unit/test_versions.py checks they agree).
RELEASES = {1: "0.1.0", 2: "0.2.0"}
BASELINE_RELEASE = baseline.BASELINE_RELEASE
# The one command that raises the cluster version: not in the baseline, let through by the
# node only when every member reported a release at least that new.
SET_CLUSTER_VERSION = "SetClusterVersion"
# From this cluster version on, replicas compare digests of scheme v2 (core/digest_v2.py)
# instead of v1: every node of a mixed cluster must compute the same digest, so the switch
# waits for the SetClusterVersion that says every node runs a release that has v2. Applying
# it recomputes the whole digest in v2 (``SchedulerState._apply``), on every node alike.
DIGEST_V2_RELEASE = 3


def digest_scheme(cluster_version: int) -> int:
    """The digest scheme a state at ``cluster_version`` keeps (1 or 2)."""
    return 2 if cluster_version >= DIGEST_V2_RELEASE else 1


# Release-1 vocabularies of plain-string fields: (class, field) -> the values it knew.
BASELINE_VALUES: dict[tuple[str, str], frozenset[str]] = {
    ("TaskSpec", "kind"): frozenset({"bash", "python"}),
    ("SetSecret", "kind"): frozenset({"variable", "connection"}),
    ("DeleteSecret", "kind"): frozenset({"variable", "connection"}),
}
_LEAVES = (str, bytes, int, float, bool, datetime, date, time, timedelta, type(None))
_MISSING: Any = dataclasses.MISSING


def upgrade_hint(cluster_version: int) -> str:
    return (
        f"the cluster runs release {cluster_version}; finish the upgrade of every node first"
        " (`raftsched cluster status` shows each node's release and the cluster version)"
    )


def refusal(command: Any, cluster_version: int) -> str | None:
    """Why a release-``cluster_version`` node could not apply ``command`` as this release
    does (None: it can). Only release 1 is described, so any newer cluster version allows
    everything this release knows."""
    if cluster_version > BASELINE_RELEASE:
        return None
    what = first_unknown(command)
    if what is None:
        return None
    return f"{what} is new in release {RELEASE}: {upgrade_hint(cluster_version)}"


def first_unknown(value: Any) -> str | None:
    """The first part of ``value`` that release 1 does not know, described; None if none.
    Walks with an explicit stack (nothing recurses on user data)."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, Enum):
            known = baseline.ENUMS.get(type(item).__name__)
            if known is None or item.value not in known:
                return f"{where or type(item).__name__} = {type(item).__name__}.{item.name}"
        elif isinstance(item, _LEAVES):
            continue
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            problem = _unknown_fields(item, where, stack)
            if problem is not None:
                return problem
        elif isinstance(item, tuple | list | frozenset | set):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, dict):
            for key, v in item.items():
                stack.append((key, where))
                stack.append((v, f"{where}[{key!r}]"))
        else:
            return f"{where or 'value'} of type {type(item).__name__}"
    return None


def _unknown_fields(item: Any, where: str, stack: list[tuple[Any, str]]) -> str | None:
    name = type(item).__name__
    known = baseline.CLASSES.get(name)
    if known is None:
        return f"{where + ' ' if where else ''}{name}"
    for f in dataclasses.fields(item):
        value = getattr(item, f.name)
        path = f"{where or name}.{f.name}"
        if f.name not in known:
            if not _is_default(f, value):
                return path
            continue
        vocabulary = BASELINE_VALUES.get((name, f.name))
        if vocabulary is not None and isinstance(value, str) and value not in vocabulary:
            return f"{path} = {value!r}"
        stack.append((value, path))
    return None


def _is_default(f: dataclasses.Field[Any], value: Any) -> bool:
    if f.default is not _MISSING:
        default = f.default
    elif f.default_factory is not _MISSING:
        default = f.default_factory()
    else:
        return False
    return bool(type(value) is type(default) and value == default)


# -- reading entries written by an older release -------------------------------------------


def _setstate_with_defaults(self: Any, state: Any) -> None:
    """``__setstate__`` of a frozen slots dataclass that fills fields missing at the end (an
    entry pickled by an older release) with their defaults."""
    all_fields = dataclasses.fields(self)
    for f, value in zip(all_fields, state, strict=False):
        object.__setattr__(self, f.name, value)
    for f in all_fields[len(state) :]:
        if f.default is not _MISSING:
            value = f.default
        elif f.default_factory is not _MISSING:
            value = f.default_factory()
        else:
            raise TypeError(f"{type(self).__name__}.{f.name}: no value and no default")
        object.__setattr__(self, f.name, value)


def install_tolerant_unpickling(modules: Iterable[ModuleType]) -> list[type]:
    """Give every frozen slots dataclass defined in ``modules`` :func:`_setstate_with_defaults`
    (those with a ``__setstate__`` of their own keep it); the classes changed."""
    changed = []
    for module in modules:
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and obj.__module__ == module.__name__
                and dataclasses.is_dataclass(obj)
                and getattr(getattr(obj, "__setstate__", None), "__qualname__", "")
                == "_dataclass_setstate"
            ):
                obj.__setstate__ = _setstate_with_defaults  # type: ignore[attr-defined]
                changed.append(obj)
    return changed


def tolerant(cls: type) -> bool:
    return getattr(cls, "__setstate__", None) is _setstate_with_defaults


# A snapshot of a state whose cluster version is past the baseline says this schema version,
# so that a release-1 node refuses it (it knows schema versions up to 3) instead of loading a
# state it cannot run; at the baseline a snapshot is exactly the previous release's.
SNAPSHOT_SCHEMA_VERSION = 4


def apply_set_cluster_version(state: Any, cmd: Any, now: datetime, index: int) -> Result:
    """``SetClusterVersion``'s handler (``state.cluster_version`` belongs to SchedulerState).
    Never lowered: a late or repeated proposal of an older version changes nothing. Leaving
    release 1 emits every secret and callback job held (``core.persisted``)."""
    was = state.cluster_version
    state.cluster_version = max(state.cluster_version, cmd.version)
    if not persisted.persists_at(was) and persisted.persists(state):
        persisted.emit_all(state)
    return Result(True, value=state.cluster_version)
