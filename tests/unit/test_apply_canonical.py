"""The fast fingerprint text (core/digest.py: memoized enum and datetime reprs, dict key
orders per shape, one getter per dataclass) spells every value as the plain algorithm the
digests were pinned with, kept here as the reference; and an outbox entry leaves the digest
with the share it brought (issue #11: kept, not fingerprinted again)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum, IntEnum, StrEnum
from typing import Any

from raftsched.core import digest as dg
from raftsched.core.digest_sum import DigestSum
from raftsched.core.model import OutboxKind, RunState, TaskKey, TaskState, added_field
from raftsched.core.outbox import Outbox


def _reference(value: Any) -> str:
    """The text as the digests were pinned: repr for scalars, sorted dict items, dataclass
    fields in order without added ones at their default (recursive: small test values)."""
    if isinstance(value, (str, int, float, bool, type(None), datetime)):
        return repr(value)
    if isinstance(value, dict):
        items = sorted((_reference(k), _reference(v)) for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_reference(v) for v in value) + ")"
    names = dg._present_fields(value)
    if names is None:
        return repr(value)
    inner = ",".join(_reference(getattr(value, n)) for n in names)
    return f"{type(value).__name__}({inner})"


class Colour(Enum):
    RED = (1, 2)


class Level(IntEnum):
    LOW = 1


class Mode(StrEnum):
    FAST = "fast"


@dataclass(frozen=True)
class Inner:
    key: TaskKey
    when: datetime | None = None
    extra: str | None = added_field(None)


@dataclass
class Outer:
    items: list[Any] = field(default_factory=list)
    inner: Inner | None = None
    mode: Mode = Mode.FAST


_ZONES = (UTC, timezone(timedelta(hours=2)), timezone(timedelta(0), "Z0"))
_BASE = datetime(2024, 3, 1, 12, 30, tzinfo=UTC)


def _scalar(rng: random.Random) -> Any:
    pick = rng.randrange(14)
    when = _BASE + timedelta(seconds=rng.randrange(5))
    return [
        lambda: rng.choice(["", "a", "ab", "a'b", 'q"', "é", "a\nb", "\x00"]),
        lambda: rng.randrange(-3, 3),
        lambda: rng.choice([0.5, -0.0, float("inf"), 1e300]),
        lambda: rng.choice([True, False, None]),
        lambda: when,  # UTC: memoized
        lambda: when.astimezone(rng.choice(_ZONES)),  # equal instants, other reprs
        lambda: when.replace(fold=1),
        lambda: when.replace(tzinfo=None),
        lambda: rng.choice(list(TaskState)),
        lambda: rng.choice(list(RunState)),
        lambda: rng.choice([Colour.RED, Level.LOW, Mode.FAST, OutboxKind.DAG_RUN]),
        lambda: TaskKey("d", rng.choice(["r1", "r2"]), "t"),
        lambda: rng.choice(["queued", "1", 1]),  # a plain str equal to an enum's value
        lambda: Inner(TaskKey("d", "r", "t"), when, rng.choice([None, "x"])),
    ][pick]()


def _value(rng: random.Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.4:
        return _scalar(rng)
    pick = rng.randrange(5)
    width = rng.randrange(0, 6)
    if pick == 0:  # str keys: the memoized key orders (shapes recur)
        keys = rng.sample(["dag_id", "a", "ab", "b'", "run_id", "x\ny", "é", "_"], width)
        return {k: _value(rng, depth - 1) for k in keys}
    if pick == 1:  # keys of any plain type, equal texts of different types included
        return {_scalar(rng) if rng.random() < 0.5 else rng.randrange(4): i for i in range(width)}
    if pick == 2:
        return [_value(rng, depth - 1) for _ in range(width)]
    if pick == 3:
        return tuple(_value(rng, depth - 1) for _ in range(width))
    inner = Inner(TaskKey("d", "r", "t"), _scalar(rng) if rng.random() < 0.5 else None)
    return Outer([_value(rng, depth - 1) for _ in range(width)], inner)


def test_the_fast_text_equals_the_reference_on_random_values() -> None:
    rng = random.Random(11)
    for _ in range(3000):
        value = _value(rng, 4)
        assert dg.canonical(value) == _reference(value), value


def test_values_past_the_recursion_budget_are_spelled_alike() -> None:
    rng = random.Random(12)
    for _ in range(200):
        value = _value(rng, 3)
        for level in range(dg._RECURSION_BUDGET + 3):  # into the explicit-stack walk
            value = {"k": value, "l": [level]} if level % 2 else [value, (level,)]
        assert dg.canonical(value) == _reference(value)


def test_equal_datetimes_in_other_zones_keep_their_own_text() -> None:
    utc = datetime(2024, 1, 1, tzinfo=UTC)
    other = utc.astimezone(timezone(timedelta(hours=3)))
    assert utc == other
    for first, second in ((utc, other), (other, utc)):
        assert dg.canonical(first) == repr(first) and dg.canonical(second) == repr(second)
    assert dg.canonical({"k": utc}) != dg.canonical({"k": other})


def test_user_dicts_of_many_shapes_stay_correct_past_the_memo_bound() -> None:
    for i in range(dg._ORDER_MEMO_SIZE * 2):
        value = {f"k{i}": i, f"j{i % 7}": [i], "z": None}
        assert dg.canonical(value) == _reference(value)
    assert len(dg._KEY_ORDERS) <= dg._ORDER_MEMO_SIZE


def test_an_acknowledged_entry_leaves_with_the_share_it_brought() -> None:
    total = DigestSum()
    box = Outbox(total)
    for i in range(10):
        box.emit(OutboxKind.DAG_RUN, {"run_id": f"r{i}", "conf": {"n": i}})
    expected = sum(dg.contribution(dg.fp_outbox(e)) for e in list(box)[4:]) % dg.MOD
    assert box.ack(4) == ""
    assert box.digest_share == total.value == expected
    assert box.ack(10) == "" and box.digest_share == total.value == 0


def test_restored_entries_are_fingerprinted_when_they_leave() -> None:
    source = Outbox(DigestSum())
    for i in range(6):
        source.emit(OutboxKind.TASK_LOG, {"text": f"line {i}\n"})
    restored_sum = DigestSum()
    restored = Outbox(restored_sum)
    restored.load(source.acked_seq, source.last_seq, list(source), source.digest_share)
    restored_sum.value = restored.digest_share
    restored.emit(OutboxKind.TASK_LOG, {"text": "after\n"})
    assert restored.ack(3) == "" and restored.ack(7) == ""
    assert restored.digest_share == restored_sum.value == 0 and restored.log_chars == 0
