"""The second digest scheme (v2): an entity's share hashed from its field values, not a text.

Scheme v1 (``core.digest``) hashes a canonical *text* of every entity it adds or removes:
rendering it (a repr per field, dataclasses and dicts spelled out) was 27-50% of a
follower's apply. v2 keeps the same structure (an order-independent sum modulo 2**128 of
one share per entity, maintained incrementally, so a changed record costs O(its own fields))
and hashes a tuple of the field values instead: ``blake2b(marshal.dumps(code, 2))``, where
``code`` is the entity built out of plain values only (str, int, float, bool, None, bytes,
tuples), which marshal writes in C.

Why this encoding is deterministic and as strong as the text:

- marshal *version 2* writes no back-references and does not mark interned strings (both
  came with version 3 and depend on reference counts and interning), so equal plain values
  give equal bytes in every process; its version-2 format is frozen, so every Python of a
  mixed cluster agrees. str's salted ``hash()`` is never used.
- dicts are written with their items sorted by key (insertion order never matters), sets
  never occur in the model, and everything that is not plain is written with a marker that
  no plain value has (bytes never occur in replicated values: they are JSON-able): a
  dataclass or named tuple as ``(b"ClassName", field, ...)``, a dict as ``(b"{", [(key,
  value), ...])``, an enum member as ``(b"EnumName", value)``, a
  datetime as ``(b"dt", isoformat)``. So two values that differ in any field, or in a type
  (``1`` vs ``True`` vs ``1.0`` vs ``"1"``, a str vs an enum member), give different bytes.
- fields added by a later release are left out while they hold their default
  (``model.added_field``), as in v1, so a record written before the field existed keeps its
  share.
- user data nested deeper than ``_BUDGET`` (a conf, a result) is written as its v1 canonical
  text, which walks with an explicit stack: nothing recurses without bound here.

The scheme is chosen per state from its cluster version (``versions.DIGEST_V2_RELEASE``),
see ``digest_sum.DigestSum``.
"""

from __future__ import annotations

import hashlib
import marshal
from collections.abc import Callable
from datetime import UTC, datetime
from enum import Enum
from itertools import compress
from operator import is_not
from typing import Any

from raftsched.core import digest as dg
from raftsched.core.model import DagSpec, Lease, Schedule, TaskKey, TaskSpec

MARSHAL_VERSION = 2  # the last version without back-references (see the module docstring)
_BUDGET = 12  # nesting levels written directly; deeper user data goes as its v1 text

_PLAIN = frozenset({str, int, float, bool, type(None)})
_ENUMS: dict[type, dict[Any, tuple[bytes, Any]]] = {}  # per enum class: member -> its code
_DT_CODES: dict[datetime, tuple[bytes, str]] = {}  # recent UTC datetimes' codes (see dt_repr)
_DT_MEMO_SIZE = 4096
_SHAPES: dict[type, dg.Shape | None] = {}  # per class: v1's field getter (None: no dataclass)
_NAMES: dict[type, bytes] = {}


def share(fp: Callable[..., str], args: tuple[Any, ...]) -> int:
    """The v2 share of the entity v1 fingerprints as ``fp(*args)``: the same values, with
    ``fp``'s name as the entity's kind (the golden digests pin these names)."""
    if fp is dg.fp_ti:
        return _ti_share(args[0])
    if fp is dg.fp_outbox:  # the most frequent after task instances: no selector call
        entry = args[0]
        code: tuple[Any, ...] = ("fp_outbox", entry.seq, str(entry.kind), encode(entry.data))
    else:
        select = _SELECT.get(fp)
        if select is not None:
            args = select(*args)
        plain = _PLAIN
        code = (fp.__name__, *[a if type(a) in plain else encode(a, _BUDGET) for a in args])
    data = marshal.dumps(code, MARSHAL_VERSION)
    return int.from_bytes(hashlib.blake2b(data, digest_size=16).digest())


def encode(value: Any, budget: int = _BUDGET) -> Any:
    """``value`` built from plain values only (see the module docstring)."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is dict and set(map(type, value.values())) <= _PLAIN:
        try:  # an outbox row: every value plain, all done in C
            items = sorted(value.items())  # keys are unique: values are never compared
        except TypeError:  # keys of mixed types: as v1 spells it
            return (b"text", dg.canonical(value))
        if set(map(type, value)) <= _PLAIN:
            return (b"{", items)
    if kind is datetime:
        return _dt_code(value)
    if isinstance(value, Enum):
        codes = _ENUMS.get(kind)
        if codes is None:
            codes = _ENUMS[kind] = {}
        code = codes.get(value)
        if code is None:
            code = codes[value] = (kind.__name__.encode(), encode(value.value))
        return code
    if not budget:
        return (b"text", dg.canonical(value))
    budget -= 1
    plain = _PLAIN
    if kind is tuple or kind is list:
        return tuple([v if type(v) in plain else encode(v, budget) for v in value])
    if kind is dict:
        try:
            items = sorted(value.items())  # keys are unique: values are never compared
        except TypeError:  # keys of mixed types: as v1 spells it
            return (b"text", dg.canonical(value))
        return (
            b"{",
            [
                (
                    k if type(k) in plain else encode(k, budget),
                    v if type(v) in plain else encode(v, budget),
                )
                for k, v in items
            ],
        )
    if isinstance(value, tuple):  # a named tuple (results' items)
        name = kind.__name__.encode()
        return (name, *[v if type(v) in plain else encode(v, budget) for v in value])
    immutable = kind in _IMMUTABLE
    if immutable:
        held = _CODES.get(id(value))
        if held is not None and held[0] is value:
            return held[1]
    shape = _SHAPES.get(kind, ())
    if shape == ():
        shape = _SHAPES[kind] = dg._shape(kind)
        _NAMES[kind] = kind.__name__.encode()
    if shape is None:  # not a dataclass (a date, a timedelta): its repr is exact
        return (b"repr", repr(value))
    getter, added = shape
    values = getter(value)
    if added:
        at_default = {i for i, default in added if values[i] == default}
        if at_default:
            values = tuple(v for i, v in enumerate(values) if i not in at_default)
    code = (_NAMES[kind], *[v if type(v) in plain else encode(v, budget) for v in values])
    if immutable:
        if len(_CODES) >= _CODES_SIZE:
            _CODES.clear()
        _CODES[id(value)] = (value, code)
    return code


# Codes of records that cannot change once built, by identity: a task's spec is shared by
# every run of its DAG and travels in every lease's result (remembered per request id), a
# lease in its task instance and in that result. Only frozen dataclasses whose every field
# holds an immutable value (no dict, no list: tests/unit/test_digest_v2.py checks) are
# listed. An entry holds its record, so no other object can have that id while it is here;
# bounded, and emptied when full.
_IMMUTABLE = frozenset({TaskSpec, TaskKey, Lease, Schedule, DagSpec})
_CODES: dict[int, tuple[Any, Any]] = {}
_CODES_SIZE = 65_536


def _dt_code(value: datetime) -> tuple[bytes, str]:
    """A datetime's code, memoized for UTC ones (a run's dates and a command's ``now`` recur;
    only UTC with fold 0 is kept, so equal instants in other zones never share an entry)."""
    if value.tzinfo is not UTC or value.fold:
        return (b"dt", value.isoformat())
    code = _DT_CODES.get(value)
    if code is None:
        if len(_DT_CODES) >= _DT_MEMO_SIZE:
            _DT_CODES.clear()
        code = _DT_CODES[value] = (b"dt", value.isoformat())
    return code


# -- task instances: O(changed fields) -------------------------------------------------------
#
# A task instance changes a field or two per command (state, lease, a date) and is counted
# twice per change: its old share subtracted at its first touch, its new one added at the
# command's end. Per instance (by id) this keeps the field values last hashed (held, so they
# stay alive and ``is`` compares them soundly), their codes and the share: a share asked
# for unchanged values is a lookup, and a changed instance encodes only the fields that are
# not the very objects hashed last time. The share depends on the values only, so an entry
# of a dead instance whose id was reused is just a miss or, with identical values, right.
# Sound because every field of a task instance holds an immutable value (nothing is
# changed in place that ``is`` would not see); bounded, and emptied when full.
_TI_MEMO: dict[int, tuple[tuple[Any, ...], list[Any], int]] = {}
_TI_MEMO_SIZE = 65_536


def _ti_share(ti: Any) -> int:
    kind = type(ti)
    shape = _SHAPES.get(kind, ())
    if shape == () or shape is None:  # first use (or not a dataclass): the general way
        return share(_fp_ti_general, (ti,))
    getter, added = shape
    values = getter(ti)
    memo = _TI_MEMO.get(id(ti))
    plain = _PLAIN
    if memo is not None:
        old_values, old_codes, old_share = memo
        changed = list(map(is_not, values, old_values))
        if True not in changed:
            return old_share
        codes = old_codes.copy()
        for i in compress(range(len(values)), changed):  # only the fields that changed
            v = values[i]
            codes[i] = v if type(v) in plain else encode(v)
    else:
        codes = [v if type(v) in plain else encode(v) for v in values]
    kept = codes
    if added:
        cut = added[0][0]
        if cut + len(added) == len(values):  # added fields last, as the release rules say
            kept = codes[:cut]
            kept += [codes[i] for i, default in added if values[i] != default]
        else:
            at_default = {i for i, default in added if values[i] == default}
            kept = [code for i, code in enumerate(codes) if i not in at_default]
    data = marshal.dumps(("fp_ti", (_NAMES[kind], *kept)), MARSHAL_VERSION)
    result = int.from_bytes(hashlib.blake2b(data, digest_size=16).digest())
    if len(_TI_MEMO) >= _TI_MEMO_SIZE:
        _TI_MEMO.clear()
    _TI_MEMO[id(ti)] = (values, codes, result)
    return result


def _fp_ti_general(ti: Any) -> str:
    """Never called: names ``fp_ti``'s general v2 share (the first of each class, tests)."""
    raise AssertionError("a stand-in for digest.fp_ti")


_fp_ti_general.__name__ = "fp_ti"


# Fingerprints that take a whole record but spell only some of its values: the same values
# (a DAG record's spec is its hash; an outbox entry, whose kind v1 spells as its text, is
# written out in ``share``).
_SELECT: dict[Callable[..., str], Callable[..., tuple[Any, ...]]] = {
    dg.fp_dag: lambda dag_id, r: (
        dag_id,
        r.spec.spec_hash,
        r.paused,
        r.active,
        r.updated_at,
        r.last_logical_date,
    ),
}
