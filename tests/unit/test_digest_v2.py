"""The second digest scheme (core/digest_v2.py) and the switch to it (versions.DIGEST_V2_RELEASE).

- golden digests of v2 (the golden scenarios of test_digest_golden, run on a state switched
  to v2 first): what replicas of a finalized release-3 cluster compare must only change on
  purpose; v1's stay pinned in test_digest_golden;
- any single changed field of any record the digest covers changes its v2 share, so v2
  detects divergence as v1 does (exhaustive over the model's dataclasses);
- incremental == recompute and restore == original in v2; a task instance's memoized share
  equals the general one;
- the switch: below DIGEST_V2_RELEASE a state keeps v1 (a mixed 0.2.0/0.3.0 cluster), the
  SetClusterVersion that reaches it recomputes every share in v2, alike on every replica,
  whatever order their states were built in.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

import pytest

from raftsched.core import callback_table as ct
from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import digest_v2 as v2
from raftsched.core import versions as vs
from raftsched.core.digest_sum import DigestSum
from raftsched.core.model import (
    DagRecord,
    DagRun,
    Lease,
    OutboxEntry,
    OutboxKind,
    RunState,
    RunType,
    TaskInstance,
    TaskKey,
    TaskState,
)
from raftsched.core.results import Item, LeaseGrant, Result
from raftsched.core.secret_table import SecretRecord, fp_secret
from raftsched.core.state import SchedulerState
from tests.unit import test_digest_golden as golden
from tests.unit.test_state_harness import T0, Sim, at, dag, task


@pytest.fixture(autouse=True)
def _release_with_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    # SetClusterVersion and restore accept cluster versions up to this release; v2 comes
    # with release 3 (a no-op once RELEASE is 3)
    monkeypatch.setattr(vs, "RELEASE", max(vs.RELEASE, vs.DIGEST_V2_RELEASE))


def _finalize(sim: Sim, version: int = vs.DIGEST_V2_RELEASE) -> None:
    result = sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=T0, version=version))
    assert result.ok, result


class _V2Sim(Sim):
    """A Sim whose state is switched to v2 before its first command."""

    def __init__(self) -> None:
        super().__init__()
        _finalize(self)
        assert self.state.digest_scheme() == 2


# -- golden digests ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tasks", "dags"])
def test_v2_golden_digests_are_pinned(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(golden, "Sim", _V2Sim)
    steps, sim = getattr(golden, f"_scenario_{name}")()
    assert sim.state.digest_scheme() == 2
    assert sim.state.digest() == sim.state.recompute_digest()
    assert (golden._pin(steps), sim.state.digest()) == GOLDEN_V2[name]


def test_v2_digests_differ_from_v1() -> None:
    v1, v2_sim = Sim(), _V2Sim()
    v1.index = v2_sim.index  # the same applied index: only the scheme differs
    for sim in (v1, v2_sim):
        sim.register(dag("d", task("a")))
    assert v1.state.digest_scheme() == 1
    assert v1.state.digest() != v2_sim.state.digest()


# -- the divergence detector stays as strong -----------------------------------------------


def _variants(value: Any) -> Iterator[Any]:
    """Values of the same shape as ``value`` that differ from it in exactly one place."""
    if isinstance(value, bool):
        yield not value
    elif isinstance(value, Enum):
        yield from (m for m in type(value) if m is not value)
    elif isinstance(value, int):
        yield value + 1
        yield float(value)  # the same number, another type
    elif isinstance(value, float):
        yield value + 0.5
    elif isinstance(value, str):
        yield value + "x"
        if value:
            yield value[:-1]
    elif isinstance(value, datetime):
        yield value + timedelta(microseconds=1)
    elif value is None:
        yield 0
        yield ""
    elif isinstance(value, dict):
        yield {**value, "extra": 1}
        for key, item in value.items():
            yield from ({**value, key: other} for other in _variants(item))
    elif isinstance(value, list):
        yield [*value, value[0] if value else 0]
        for i, item in enumerate(value):
            yield from ([*value[:i], other, *value[i + 1 :]] for other in _variants(item))
    elif isinstance(value, tuple) and not hasattr(value, "_fields"):
        yield (*value, value[0] if value else 0)
        for i, item in enumerate(value):
            yield from ((*value[:i], other, *value[i + 1 :]) for other in _variants(item))
    elif isinstance(value, tuple):  # a named tuple
        for name, item in zip(value._fields, value, strict=True):
            yield from (value._replace(**{name: other}) for other in _variants(item))
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            yield from (dataclasses.replace(value, **{f.name: o}) for o in _variants(item))
    else:
        raise AssertionError(f"no variants of {type(value).__name__}")


KEY = TaskKey("d", "scheduled__2024-01-01T00:00:00+00:00", "a")
LEASE = Lease(KEY, 2, "w1", 17, at(30))
FULL_TI = TaskInstance(  # every field set to a value other than its default
    KEY,
    TaskState.RUNNING,
    try_number=2,
    max_tries=3,
    lease=LEASE,
    next_retry_at=at(5),
    queued_at=at(1),
    start_date=at(2),
    end_date=at(3),
    exit_code=4,
    message="m",
    log_chunks=5,
    worker_id="w1",
    lease_token=17,
    result_json='{"r": 1}',
)
FULL_RUN = DagRun(
    "d",
    "manual__x",
    at(0),
    at(-60),
    at(0),
    RunType.MANUAL,
    RunState.RUNNING,
    conf={"k": [1, 2.5, {"n": None, "s": "é"}], "b": True},
    created_at=at(1),
    start_date=at(2),
    end_date=at(3),
)
SPEC = dataclasses.replace(dag("d", task("a")), spec_hash="h1")
DAG_RECORD = DagRecord(SPEC, paused=True, active=False, updated_at=at(1))


def _records() -> list[tuple[Callable[..., str], tuple[Any, ...]]]:
    """Every kind of entity the digest covers, with every field set (fp, args)."""
    grant = LeaseGrant(LEASE, SPEC.tasks[0], "/f.py", at(0), at(-60), at(0), {"c": 1}, 3, "{}")
    job = ct.CallbackJob(
        "j1", 1, "d", "r", "a", 1, "success", "m:f", "{}", "/f.py", "{}", "a", 1, at(1)
    )
    job = dataclasses.replace(
        job,
        state="running",
        attempts=1,
        worker_id="w1",
        token=5,
        expires_at=at(9),
        finished_at=at(10),
        message="m",
    )
    return [
        (dg.fp_ti, (FULL_TI,)),
        (dg.fp_ti, (TaskInstance(KEY),)),  # the defaults, lease None included
        (dg.fp_run, (FULL_RUN, "hash", 7)),
        (dg.fp_outbox, (OutboxEntry(3, OutboxKind.TASK_INSTANCE, {"a": 1, "b": "x"}),)),
        (dg.fp_outbox, (OutboxEntry(4, OutboxKind.DAG_RUN, {"conf": {"k": [1]}, "n": None}),)),
        (dg.fp_request, ("req-1", Result(True, "", (grant,), False))),
        (dg.fp_request, ("req-2", Result(False, "stale", (Item(False, "x", 3),), True))),
        (dg.fp_request, ("req-3", Result(True, "", TaskState.SUCCESS))),
        (dg.fp_slot, (("d", at(0)), at(9))),
        (dg.fp_fence, (KEY, at(9))),
        (fp_secret, (("variable", "k"), SecretRecord("token", "desc", at(1)))),
        (ct.fp_job, (job,)),
        (ct.fp_alert, (("d", "r"), at(2))),
        (ct.fp_counters, (3, 1)),
    ]


def _v2(fp: Callable[..., str], args: tuple[Any, ...]) -> int:
    return DigestSum(scheme=2).share(fp, *args)


@pytest.mark.parametrize(("fp", "args"), _records(), ids=lambda x: getattr(x, "__name__", ""))
def test_any_single_changed_field_changes_the_v2_share(
    fp: Callable[..., str], args: tuple[Any, ...]
) -> None:
    base = _v2(fp, args)
    changed = 0
    for i, arg in enumerate(args):
        for other in _variants(arg):
            changed_args = (*args[:i], other, *args[i + 1 :])
            assert _v2(fp, changed_args) != base, (fp.__name__, i, other)
            changed += 1
    assert changed >= len(args)


def test_any_single_changed_field_of_a_dag_record_changes_its_v2_share() -> None:
    base = _v2(dg.fp_dag, ("d", DAG_RECORD))
    others = [
        dataclasses.replace(DAG_RECORD, paused=False),
        dataclasses.replace(DAG_RECORD, active=True),
        dataclasses.replace(DAG_RECORD, updated_at=at(2)),
        dataclasses.replace(DAG_RECORD, last_logical_date=at(0)),
        dataclasses.replace(DAG_RECORD, spec=dataclasses.replace(SPEC, spec_hash="other")),
    ]
    assert all(_v2(dg.fp_dag, ("d", other)) != base for other in others)
    assert _v2(dg.fp_dag, ("e", DAG_RECORD)) != base


def test_the_variants_cover_every_field_of_every_record() -> None:
    """The exhaustive test above is only as good as its samples: each dataclass it covers
    has every field away from its default in some sample, so every field was changed."""
    seen: dict[type, set[str]] = {}

    def visit(value: Any) -> None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                item = getattr(value, f.name)
                if f.default is dataclasses.MISSING or item != f.default:
                    seen.setdefault(type(value), set()).add(f.name)
                visit(item)
        elif isinstance(value, tuple):
            for item in value:
                visit(item)

    for _, args in _records():
        visit(args)
    for kind in (TaskInstance, DagRun, Lease, TaskKey, LeaseGrant, ct.CallbackJob):
        names = {f.name for f in dataclasses.fields(kind)}
        assert names <= seen[kind], kind


def test_an_enum_member_and_its_value_differ_and_so_do_equal_numbers_of_other_types() -> None:
    ti = TaskInstance(KEY)
    assert _v2(dg.fp_slot, (("d", 1), None)) != _v2(dg.fp_slot, (("d", True), None))
    assert _v2(dg.fp_slot, (("d", 1), None)) != _v2(dg.fp_slot, (("d", 1.0), None))
    assert _v2(dg.fp_fence, (TaskState.QUEUED, None)) != _v2(dg.fp_fence, ("queued", None))
    assert _v2(dg.fp_fence, (RunState.QUEUED, None)) != _v2(dg.fp_fence, (TaskState.QUEUED, None))
    assert _v2(dg.fp_ti, (ti,)) != _v2(dg.fp_fence, (ti, None))  # the kinds differ


def test_records_whose_codes_are_kept_by_identity_cannot_change() -> None:
    """digest_v2 keeps the codes of these classes by object identity: sound only if an
    instance can never change, i.e. frozen, and no field can hold a dict or a list."""
    hints_of = typing.get_type_hints
    for kind in v2._IMMUTABLE:
        assert kind.__dataclass_params__.frozen, kind  # type: ignore[attr-defined]
        for name, hint in hints_of(kind).items():
            text = str(hint)
            assert "dict" not in text and "list" not in text and "Any" not in text, (kind, name)


def test_dict_order_never_matters() -> None:
    a = OutboxEntry(1, OutboxKind.DAG_RUN, {"a": 1, "b": {"x": 1, "y": [1, 2]}})
    b = OutboxEntry(1, OutboxKind.DAG_RUN, {"b": {"y": [1, 2], "x": 1}, "a": 1})
    assert _v2(dg.fp_outbox, (a,)) == _v2(dg.fp_outbox, (b,))


def test_deep_user_data_is_hashed_without_recursion() -> None:
    deep: Any = "leaf"
    for _ in range(50_000):
        deep = {"k": [deep]}
    entry = OutboxEntry(1, OutboxKind.DAG_RUN, {"conf": deep})
    assert _v2(dg.fp_outbox, (entry,)) != _v2(
        dg.fp_outbox, (OutboxEntry(1, OutboxKind.DAG_RUN, {"conf": {}}),)
    )


def test_a_task_instances_memoized_share_is_its_general_share() -> None:
    ti = dataclasses.replace(FULL_TI)
    general = v2.share(v2._fp_ti_general, (ti,))
    v2._TI_MEMO.clear()
    assert v2.share(dg.fp_ti, (ti,)) == general  # a miss
    assert v2.share(dg.fp_ti, (ti,)) == general  # a hit
    for f in dataclasses.fields(ti):  # one field changed at a time, in place
        for other in _variants(getattr(ti, f.name)):
            setattr(ti, f.name, other)
            expected = v2.share(v2._fp_ti_general, (ti,))
            assert v2.share(dg.fp_ti, (ti,)) == expected != general, f.name
            setattr(ti, f.name, getattr(FULL_TI, f.name))
            assert v2.share(dg.fp_ti, (ti,)) == general


# -- incremental, recompute, restore, the switch --------------------------------------------


def test_v2_incremental_equals_recompute_and_restore_at_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    digests: list[str] = []

    def check(sim: Sim, steps: list[str]) -> None:
        state = sim.state
        assert state.digest_scheme() == 2
        assert state.digest() == state.recompute_digest()
        restored = SchedulerState.restore(state.snapshot())
        assert restored.digest_scheme() == 2
        assert restored.digest() == state.digest() == restored.recompute_digest()
        digests.append(state.digest())

    monkeypatch.setattr(golden, "Sim", _V2Sim)
    monkeypatch.setattr(golden, "_fold", check)
    golden._scenario_tasks()
    golden._scenario_dags()
    assert len(digests) > 20


def test_below_the_v2_release_a_state_keeps_v1() -> None:
    """A mixed 0.2.0/0.3.0 cluster (cluster version 2) compares v1 digests."""
    plain, raised = Sim(), Sim()
    _finalize(raised, vs.DIGEST_V2_RELEASE - 1)
    plain.index = raised.index
    for sim in (plain, raised):
        sim.register(dag("d", task("a")))
    assert raised.state.digest_scheme() == plain.state.digest_scheme() == 1
    assert vs.digest_scheme(vs.DIGEST_V2_RELEASE - 1) == 1
    assert vs.digest_scheme(vs.DIGEST_V2_RELEASE) == 2


def test_the_switch_recomputes_every_share_alike_on_every_replica() -> None:
    """Two replicas apply the same log, one restored from a snapshot half-way (its outbox
    and request shares come from the snapshot): after the SetClusterVersion that reaches
    v2, both hold the v2 digest a state built in v2 from the start would, and later
    commands (acks of entries written in v1, evictions of v1 requests) keep them equal."""
    sim = Sim()
    sim.register(dag("d", task("a"), task("b"), task("c", "a")), dag("e", task("x")))
    sim.create("d", conf={"z": 1, "a": [1, {"q": None}]})
    grants = sim.lease(n=10, now=at(2))
    sim.complete(grants[0], success=True, now=at(3))
    replica = Sim()
    replica.state = SchedulerState.restore(sim.state.snapshot())
    replica.index, replica.requests = sim.index, sim.requests
    assert replica.state.digest() == sim.state.digest()
    for s in (sim, replica):
        _finalize(s)
        assert s.state.digest_scheme() == 2
        assert s.state.digest() == s.state.recompute_digest()
    assert replica.state.digest() == sim.state.digest()
    rebuilt = SchedulerState.restore(sim.state.snapshot())
    assert rebuilt.digest() == sim.state.digest()
    for s in (sim, replica):
        s.apply(c.AckMaterialized(request_id=s.rid(), now=at(4), seq=s.state.outbox.last_seq))
        s.complete(grants[1], success=True, now=at(5))
        assert s.state.digest() == s.state.recompute_digest()
    assert replica.state.digest() == sim.state.digest()


def test_a_repeated_set_cluster_version_changes_no_scheme() -> None:
    sim = _V2Sim()
    sim.register(dag("d", task("a")))
    _finalize(sim)
    assert sim.state.digest_scheme() == 2
    assert sim.state.digest() == sim.state.recompute_digest()


GOLDEN_V2 = {  # the same under any PYTHONHASHSEED (checked with 1 and 12345)
    "tasks": (
        "b12da6c349e003b16ed9af19c66ad8422798da602a05140a341c6e8c87413830",
        "cce19a19e1a1fcb396dfa107676fda40842fbcabf1891e3442c908c465ab3b08",
    ),
    "dags": (
        "a25dabe3685ea5922cc16a4a57e9902a351b20804bf962666bdca6dc091dbb7e",
        "d1aecb7aa604a4efa630252a51d9f82d7ecfb84fc6a01e3abba25620f9d20c69",
    ),
}
