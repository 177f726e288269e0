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
from collections.abc import Callable
from datetime import UTC, datetime
from enum import Enum
from operator import attrgetter
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
_PLAIN = _REPR_TYPES - {datetime}  # spelled inline; a datetime goes through dt_repr

# How values of each type are spelled, decided from the first one seen (the type alone
# decides: exactly as the tests of the plain algorithm would, in the same order): by repr, by
# the datetime memo (``dt_repr``), as a dict, as a sequence, by an enum's memo (a dict member
# -> repr: enum reprs are Python code, and every task instance and run holds two or three
# members), or by a dataclass's shape (a getter of every field at once, and the (position,
# default) of fields added later, see ``_present_fields``). One lookup instead of a chain of
# isinstance tests: fingerprints are most of apply's CPU.
_BY_REPR = "repr"
_BY_DT_MEMO = "datetime"
_AS_DICT = "dict"
_AS_SEQUENCE = "sequence"
Shape = tuple[Callable[[Any], tuple[Any, ...]], tuple[tuple[int, Any], ...]]
_HOW: dict[type, str | dict[Any, str] | Shape] = {}


def _how(kind: type, value: Any) -> str | dict[Any, str] | Shape:
    how: str | dict[Any, str] | Shape
    if kind in _REPR_TYPES:
        how = _BY_DT_MEMO if kind is datetime else _BY_REPR
    elif isinstance(value, _SCALARS):
        how = {} if isinstance(value, Enum) else _BY_REPR
    elif isinstance(value, dict):
        how = _AS_DICT
    elif isinstance(value, (list, tuple)):
        how = _AS_SEQUENCE
    else:
        shape = _shape(kind)
        how = _BY_REPR if shape is None else shape
    _HOW[kind] = how
    return how


def _canonical(value: Any, budget: int) -> str:
    kind = type(value)
    how = _HOW.get(kind)
    if how is None:
        how = _how(kind, value)
    if how is _BY_REPR:
        return repr(value)
    if how is _BY_DT_MEMO:
        return dt_repr(value)
    if type(how) is dict:  # an enum
        text = how.get(value)
        if text is None:
            text = how[value] = repr(value)
        return text
    if not budget:
        return _canonical_walk(value)
    budget -= 1
    plain = _PLAIN  # inlined below: a call per scalar was most of the time
    if type(how) is tuple:  # a dataclass
        getter, added = how
        values = getter(value)
        if added:
            at_default = {i for i, default in added if values[i] == default}
            if at_default:
                values = tuple(v for i, v in enumerate(values) if i not in at_default)
        inner = ",".join([repr(v) if type(v) in plain else _canonical(v, budget) for v in values])
        return kind.__name__ + "(" + inner + ")"
    if how is _AS_DICT:
        order = None
        if len(value) <= _ORDER_MAX_KEYS and set(map(type, value)) <= _STR_ONLY:
            keys = tuple(value)
            order = _KEY_ORDERS.get(keys) or _key_order(keys)
        if order is not None:
            keys, texts = order
            return (
                "{"
                + ",".join(
                    [
                        t + (repr(v) if type(v) in plain else _canonical(v, budget))
                        for t, v in zip(texts, map(value.__getitem__, keys), strict=True)
                    ]
                )
                + "}"
            )
        items = sorted(
            [
                (
                    repr(k) if type(k) in plain else _canonical(k, budget),
                    repr(v) if type(v) in plain else _canonical(v, budget),
                )
                for k, v in value.items()
            ]
        )
        return "{" + ",".join([k + ":" + v for k, v in items]) + "}"
    return (  # a list or tuple
        "("
        + ",".join([repr(v) if type(v) in plain else _canonical(v, budget) for v in value])
        + ")"
    )


# Per tuple of dict keys (in insertion order), all exactly str (a str enum member equals its
# value but has another repr: such a dict never looks here): the keys in the order the text
# spells them (by their repr), and their reprs each with the ":" after it. Most dicts
# fingerprinted are outbox rows, of a few fixed shapes; sorting them by key text each time
# was a third of their cost. A str's repr is unique to it, so this is the order ``sorted``
# gives the (key, value) texts. Bounded (user dicts have shapes of their own): emptied when
# full.
_KEY_ORDERS: dict[tuple[Any, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}
_ORDER_MAX_KEYS = 32
_ORDER_MEMO_SIZE = 1024
_STR_ONLY = frozenset({str})


def _key_order(keys: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    pairs = sorted((repr(k), k) for k in keys)
    if len(_KEY_ORDERS) >= _ORDER_MEMO_SIZE:
        _KEY_ORDERS.clear()
    order = _KEY_ORDERS[keys] = (tuple(k for _, k in pairs), tuple(t + ":" for t, _ in pairs))
    return order


# The reprs of recent UTC datetimes. A run's dates recur: its logical date is its interval's
# end and the next run's interval start, and ``now`` is the same for every decision of a
# command; repr of an aware datetime is ~1 us, a lookup a tenth of that. Only UTC ones with
# fold 0 are kept and looked up, so two equal instants in other zones (equal, with another
# repr) never share an entry; bounded, and emptied when full.
_DT_REPRS: dict[datetime, str] = {}
_DT_MEMO_SIZE = 4096


def dt_repr(value: datetime) -> str:
    """``repr(value)``, memoized for UTC datetimes."""
    if value.tzinfo is not UTC or value.fold:
        return repr(value)
    text = _DT_REPRS.get(value)
    if text is None:
        if len(_DT_REPRS) >= _DT_MEMO_SIZE:
            _DT_REPRS.clear()
        text = _DT_REPRS[value] = repr(value)
    return text


def _shape(kind: type) -> Shape | None:
    names = _field_names(kind)
    if names is None:
        return None
    if len(names) == 1:
        one = attrgetter(names[0])
        getter: Callable[[Any], tuple[Any, ...]] = lambda v: (one(v),)  # noqa: E731
    elif names:
        getter = attrgetter(*names)
    else:
        getter = lambda v: ()  # noqa: E731
    positions = {name: i for i, name in enumerate(names)}
    added = tuple((positions[name], default) for name, default in _ADDED[kind])
    return getter, added


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
    fields = (
        dag_id,
        record.spec.spec_hash,
        record.paused,
        record.active,
        record.updated_at,
        record.last_logical_date,
    )
    # fields added later join only when set: a record without them digests as before
    if record.scheduled_runs or record.skipped or record.pause_note:
        skipped = tuple(s.to_dict() for s in record.skipped)
        fields += (record.scheduled_runs, skipped, record.pause_note)
    if record.gaps:
        fields += (("gaps", tuple(g.to_dict() for g in record.gaps)),)
    if record.terms:
        fields += (("terms", tuple(t.to_dict() for t in record.terms)),)
    return "dag:" + canonical(fields)


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
