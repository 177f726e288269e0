"""An incremental, order-independent digest of the replicated state.

Every entity (DAG record, run, task instance, outbox entry, remembered request) contributes
``blake2b(fingerprint)`` to a sum modulo 2**128; apply subtracts an entity's old contribution
before changing it and adds the new one after. So ``digest()`` costs O(1) however big the
state, equal states give equal digests whatever order they were built in, and replicas at the
same applied index can compare digests to detect divergence (shared/PYSYNCOBJ.md).
``SchedulerState.recompute_digest()`` rebuilds the sum from scratch (tests compare the two).

Fingerprints are a canonical text of plain values (:func:`canonical`): ``repr`` for scalars,
with dict keys sorted and dataclasses spelled field by field, so that neither a process's
str-hash salt nor the insertion order of a dict (a snapshot carried as JSON with sorted keys,
a conf built in another order) changes a digest.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import datetime
from typing import Any

from raftsched.core.model import OMIT_AT_DEFAULT

MOD = 1 << 128  # the sums of fingerprints are taken modulo this
_MOD = MOD


_SCALARS = (str, int, float, bool, type(None))
_FIELDS: dict[type, tuple[str, ...] | None] = {}  # per type: dataclass field names, or None
_ADDED: dict[type, tuple[tuple[str, Any], ...]] = {}  # per type: (added field, its default)


def canonical(value: Any) -> str:
    """A text of ``value`` that equal values share, whatever the order their dicts were built.

    Never recurses without bound: values nested deeper than ``_RECURSION_BUDGET`` (only user
    data is: a conf, a result) are walked with an explicit stack (:func:`_canonical_walk`), so
    no value, however deep, can raise RecursionError here. Both give the same text.
    """
    return _canonical(value, _RECURSION_BUDGET)


_RECURSION_BUDGET = 12  # frames; the model's own nesting (TaskInstance > Lease > TaskKey) is 3


# Exactly these types (no subclass: an enum member is a str) are spelled by their repr: the
# first test, as most values are one of them (a restore fingerprints millions)
_REPR_TYPES = frozenset({str, int, float, bool, type(None), datetime})


def _canonical(value: Any, budget: int) -> str:
    if type(value) in _REPR_TYPES or isinstance(value, _SCALARS):
        return repr(value)
    if not budget:
        return _canonical_walk(value)
    budget -= 1
    plain = _REPR_TYPES  # inlined below: a call per scalar was most of the time
    if isinstance(value, dict):
        items = sorted(
            [
                (
                    repr(k) if type(k) in plain else _canonical(k, budget),
                    repr(v) if type(v) in plain else _canonical(v, budget),
                )
                for k, v in value.items()
            ]
        )
        return "{" + ",".join([f"{k}:{v}" for k, v in items]) + "}"
    if isinstance(value, (list, tuple)):
        return (
            "("
            + ",".join([repr(v) if type(v) in plain else _canonical(v, budget) for v in value])
            + ")"
        )
    names = _present_fields(value)
    if names is not None:
        values = [getattr(value, n) for n in names]
        inner = ",".join([repr(v) if type(v) in plain else _canonical(v, budget) for v in values])
        return f"{type(value).__name__}({inner})"
    return repr(value)


def _canonical_walk(value: Any) -> str:
    """:func:`canonical` with an explicit stack (post-order) instead of recursion."""
    done: list[str] = []  # texts of finished values, in order
    # (value, None) = visit; (value, n) = combine the last n texts of ``done`` into value's text
    todo: list[tuple[Any, int | None]] = [(value, None)]
    while todo:
        item, count = todo.pop()
        if count is not None:
            done.append(_combine(item, done, count))
            continue
        if isinstance(item, _SCALARS):
            done.append(repr(item))
            continue
        children = _children(item)
        if children is None:
            done.append(repr(item))
            continue
        todo.append((item, len(children)))
        todo.extend((child, None) for child in reversed(children))
    return done[0]


def _children(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        return [part for pair in value.items() for part in pair]
    if isinstance(value, (list, tuple)):
        return list(value)
    names = _present_fields(value)
    return None if names is None else [getattr(value, n) for n in names]


def _combine(value: Any, done: list[str], count: int) -> str:
    parts = done[len(done) - count :] if count else []
    del done[len(done) - count :]
    if isinstance(value, dict):
        items = sorted(zip(parts[0::2], parts[1::2], strict=True))
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(parts) + ")"
    return f"{type(value).__name__}(" + ",".join(parts) + ")"


def _field_names(kind: type) -> tuple[str, ...] | None:
    names = _FIELDS.get(kind, ())
    if names == ():
        is_dc = dataclasses.is_dataclass(kind)
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind)) if is_dc else None
        _ADDED[kind] = (
            tuple(
                (f.name, f.default)
                for f in dataclasses.fields(kind)
                if f.metadata.get(OMIT_AT_DEFAULT) and f.default is not dataclasses.MISSING
            )
            if is_dc
            else ()
        )
    return names


def _present_fields(value: Any) -> tuple[str, ...] | None:
    """The fields of a dataclass ``value`` its text spells: every one, except fields added
    later (``model.added_field``) while they hold their default, so that values from before
    such a field existed keep their digests."""
    kind = type(value)
    names = _field_names(kind)
    added = _ADDED.get(kind)
    if names is None or not added:
        return names
    at_default = {name for name, default in added if getattr(value, name) == default}
    return tuple(n for n in names if n not in at_default) if at_default else names


def contribution(fingerprint: str) -> int:
    return int.from_bytes(hashlib.blake2b(fingerprint.encode(), digest_size=16).digest())


class DigestSum:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def add(self, fingerprint: str) -> None:
        self.value = (self.value + contribution(fingerprint)) % _MOD

    def remove(self, fingerprint: str) -> None:
        self.value = (self.value - contribution(fingerprint)) % _MOD


def fp_dag(dag_id: str, record: Any) -> str:
    return "dag:" + canonical(
        (
            dag_id,
            record.spec.spec_hash,
            record.paused,
            record.active,
            record.updated_at,
            record.last_logical_date,
        )
    )


def fp_run(run: Any, spec_hash: str, row_seq: int) -> str:
    return "run:" + canonical((run, spec_hash, row_seq))


def fp_ti(ti: Any) -> str:
    return "ti:" + canonical(ti)


def fp_outbox(entry: Any) -> str:
    return "ob:" + canonical((entry.seq, str(entry.kind), entry.data))


def fp_slot(slot: tuple[str, Any], evicted_at: Any) -> str:
    return "slot:" + canonical((slot[0], slot[1], evicted_at))


def fp_fence(key: Any, until: Any) -> str:
    return "fence:" + canonical((key, until))


def fp_request(request_id: str, result: Any) -> str:
    return "rq:" + canonical((request_id, result))


def finish(total: int, *scalars: Any) -> str:
    text = f"{total:032x}:{scalars!r}"
    return hashlib.sha256(text.encode()).hexdigest()
