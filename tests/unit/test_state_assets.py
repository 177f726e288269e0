"""Assets in the state machine (§21): a producer's success emits its outlets' events in the
same apply, AssetAll/AssetAny consumers get one run per satisfied condition carrying the
events, client event ids are idempotent, the bounds, the gate and digests/snapshots."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_state_harness import T0, Sim, at, dag, task

from raftsched.core import asset_commands as acm
from raftsched.core import asset_condition as ac
from raftsched.core import asset_watchers as aw
from raftsched.core import commands as c
from raftsched.core import versions as vs
from raftsched.core.asset_table import MAX_EVENTS_KEPT
from raftsched.core.model import RunType, Schedule, ScheduleKind, TaskKey
from raftsched.core.state import SchedulerState
from raftsched.core.validate import check_command
from raftsched.errors import LimitExceeded

A, B = "s3://bucket/a", "s3://bucket/b"
MANUAL = Schedule(ScheduleKind.NONE, display="assets")


def consumer(dag_id: str, condition: object) -> object:
    spec = dag(dag_id, task("t"), asset_condition=ac.canonical_json(condition))
    return replace(spec, schedule=MANUAL)


def asset_sim(*specs: object) -> Sim:
    sim = Sim()
    assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=T0, version=3)).ok
    assert sim.register(*specs).ok
    return sim


def three_dags() -> Sim:
    """producer (outlets A and B) -> consumer all_ab (A & B) and any_ab (A | B)."""
    producer = dag("producer", task("make", outlets=(A, B)))
    return asset_sim(
        producer,
        consumer("all_ab", {"all": [A, B]}),
        consumer("any_ab", {"any": [A, B]}),
    )


def emit(sim: Sim, uri: str, key: str = "", extra: str = "{}", now=T0, rid: str = ""):
    return sim.apply(
        acm.EmitAssetEvents(
            request_id=rid or sim.rid(),
            now=now,
            events=(acm.AssetEventIn(uri, extra, key),),
            actor="tester",
        )
    )


def asset_runs(sim: Sim, dag_id: str) -> list:
    return [
        rec.run
        for rec in sim.state.run_table.records()
        if rec.run.dag_id == dag_id and rec.run.run_type is RunType.ASSET_TRIGGERED
    ]


def test_a_producer_success_runs_each_consumer_once_in_the_same_apply() -> None:
    sim = three_dags()
    sim.create("producer")
    before = sim.index
    sim.run_task("make", now=at(5))
    assert sim.index == before + 2  # the lease, then the outcome: its apply did the rest
    (all_run,) = asset_runs(sim, "all_ab")
    (any_run,) = asset_runs(sim, "any_ab")
    assert all_run.run_id.startswith("asset_triggered__")
    events = json.loads(all_run.asset_events_json)
    assert [(e["uri"], e["source_dag_id"], e["source_task_id"]) for e in events] == [
        (A, "producer", "make"),
        (B, "producer", "make"),
    ]
    # one attempt's events are decided together: A | B is one run, with both events
    assert len(json.loads(any_run.asset_events_json)) == 2
    assert sim.state.assets.queued("all_ab") == {}
    rows = sim.outbox("asset_event")
    assert [r["uri"] for r in rows] == [A, B] and [r["id"] for r in rows] == [1, 2]
    links = sim.outbox("asset_run")
    assert {(r["dag_id"], tuple(r["event_ids"])) for r in links} >= {("all_ab", (1, 2))}
    assert sim.state.digest() == sim.state.recompute_digest()


def test_any_runs_per_event_and_all_waits_for_every_asset() -> None:
    sim = asset_sim(consumer("all_ab", {"all": [A, B]}), consumer("any_ab", {"any": [A, B]}))
    emit(sim, A, now=at(1))
    emit(sim, A, now=at(2))
    assert asset_runs(sim, "all_ab") == [] and len(asset_runs(sim, "any_ab")) == 2
    assert [e.id for e in sim.state.assets.queued("all_ab")[A]] == [1, 2]
    result = emit(sim, B, now=at(3))
    (item,) = result.value
    assert item.ok and item.value["event_id"] == 3
    (run,) = asset_runs(sim, "all_ab")
    assert item.value["runs"][0] == ("all_ab", run.run_id)
    assert [e["id"] for e in json.loads(run.asset_events_json)] == [1, 2, 3]
    assert (run.data_interval_start, run.data_interval_end) == (at(1), at(3))


def test_nested_condition() -> None:
    cond = {"any": [{"all": [A, B]}, "s3://c"]}
    sim = asset_sim(consumer("n", cond))
    emit(sim, A)
    assert asset_runs(sim, "n") == []
    emit(sim, "s3://c", now=at(1))
    assert len(asset_runs(sim, "n")) == 1 and sim.state.assets.queued("n") == {}


def test_a_repeated_event_id_makes_one_event_and_one_run() -> None:
    sim = asset_sim(consumer("one", A))
    first = emit(sim, A, key="evt-1")
    again = emit(sim, A, key="evt-1", now=at(1))  # a client retried with a new request id
    assert first.value[0].value["event_id"] == 1
    assert again.value[0].reason == acm.DUPLICATE_EVENT
    assert again.value[0].value == {"event_id": 1, "runs": ()}
    assert len(asset_runs(sim, "one")) == 1 and sim.state.assets.count(A) == 1
    (record,) = list(sim.state.audit)  # the first event only, by its actor
    assert (record.actor, record.action) == ("tester", "asset_event") and A in record.detail
    same_request = emit(sim, A, key="evt-1", rid="req-1000")
    assert emit(sim, A, key="evt-1", rid="req-1000").duplicate and same_request.ok


def test_two_runs_in_one_apply_get_distinct_logical_dates() -> None:
    sim = asset_sim(consumer("one", A))
    events = tuple(acm.AssetEventIn(A, "{}", f"k{i}") for i in range(3))
    result = sim.apply(acm.EmitAssetEvents(request_id=sim.rid(), now=T0, events=events))
    assert result.ok
    runs = asset_runs(sim, "one")
    assert len(runs) == 3 and len({r.logical_date for r in runs}) == 3


def test_paused_consumers_queue_until_unpaused_and_failures_emit_nothing() -> None:
    sim = three_dags()
    assert sim.apply(c.SetPaused(request_id=sim.rid(), now=T0, dag_id="any_ab", paused=True)).ok
    sim.create("producer")
    sim.run_task("make", success=False)
    assert not sim.state.assets and asset_runs(sim, "all_ab") == []
    emit(sim, A)
    assert asset_runs(sim, "any_ab") == [] and A in sim.state.assets.queued("any_ab")
    # unpausing decides what waited, in the same apply
    assert sim.apply(c.SetPaused(request_id=sim.rid(), now=T0, dag_id="any_ab", paused=False)).ok
    (run,) = asset_runs(sim, "any_ab")
    assert [e["uri"] for e in json.loads(run.asset_events_json)] == [A]
    assert sim.state.assets.queued("any_ab") == {}


def test_refused_before_cluster_version_3_and_outlets_ignored() -> None:
    sim = Sim()
    assert sim.register(dag("producer", task("make", outlets=(A,))), consumer("x", A)).ok
    result = emit(sim, A)
    assert not result.ok and result.reason == acm.NOT_YET
    sim.create("producer")
    sim.run_task("make")
    assert not sim.state.assets and asset_runs(sim, "x") == []
    refusal = vs.refusal(acm.EmitAssetEvents(request_id="r", now=T0, events=()), 2)
    assert refusal and "EmitAssetEvents" in refusal
    # the gate holds back DAG files with assets until the upgrade is finalized
    for spec in (dag("p", task("t", outlets=(A,))), consumer("x", A)):
        register = c.RegisterDags(request_id="r", now=T0, specs=(spec,))
        assert vs.refusal(register, 2) and vs.refusal(register, 3) is None
    plain = c.RegisterDags(request_id="r", now=T0, specs=(dag("p", task("t")),))
    assert vs.refusal(plain, 2) is None


@pytest.mark.parametrize(
    ("uri", "extra", "key"),
    [
        ("", "{}", ""),
        ("s3://has space", "{}", ""),
        ("x" * 1001, "{}", ""),
        ("s3://é", "{}", ""),
        (A, "[1]", ""),
        (A, "not json", ""),
        (A, json.dumps({"v": "x" * 5000}), ""),
        (A, "{}", "k\n"),
    ],
)
def test_bounds(uri: str, extra: str, key: str) -> None:
    cmd = acm.EmitAssetEvents(request_id="r", now=T0, events=(acm.AssetEventIn(uri, extra, key),))
    with pytest.raises(LimitExceeded):
        check_command(cmd)


def test_condition_bounds() -> None:
    deep: object = A
    for _ in range(ac.MAX_CONDITION_DEPTH + 1):
        deep = {"all": [deep]}
    for bad in ('{"all":[]}', '{"xor":["a"]}', "[1]", ac.canonical_json(deep)):
        with pytest.raises(LimitExceeded):
            ac.check_condition("c", bad)
    many = {"any": [f"s3://{i}" for i in range(ac.MAX_ASSETS_PER_DAG + 1)]}
    with pytest.raises(LimitExceeded):
        ac.check_condition("c", ac.canonical_json(many))


def test_events_kept_are_bounded() -> None:
    sim = asset_sim()
    for i in range(MAX_EVENTS_KEPT + 5):
        emit(sim, A, now=at(i))
    assert len(sim.state.assets.events(A)) == MAX_EVENTS_KEPT
    assert sim.state.assets.count(A) == MAX_EVENTS_KEPT + 5
    assert sim.state.digest() == sim.state.recompute_digest()


def test_snapshot_restores_the_same_digest_and_no_assets_changes_nothing() -> None:
    empty = SchedulerState()
    assert "assets" not in empty.snapshot()
    sim = three_dags()
    emit(sim, A, key="k1")
    snap = sim.state.snapshot()
    assert "assets" in snap
    restored = SchedulerState.restore(pickle.loads(pickle.dumps(snap)))
    assert restored.digest() == sim.state.digest()
    assert restored.assets.queued("all_ab").keys() == {A}
    # the restored state goes on alike: B completes all_ab on both
    for state in (sim.state, restored):
        state.apply(
            acm.EmitAssetEvents(request_id="b", now=at(9), events=(acm.AssetEventIn(B),)),
            log_index=sim.index + 1,
        )
    assert restored.digest() == sim.state.digest()
    assert len([r for r in restored.run_table.records() if r.run.dag_id == "all_ab"]) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([A, B, "s3://other"]), min_size=1, max_size=12))
def test_any_event_order_runs_once_per_satisfied_condition(order: list[str]) -> None:
    """Whatever the order, all_ab runs once each time both A and B have a queued event, and
    any_ab once per A or B event; every event is carried by at most one run of each."""
    sim = asset_sim(consumer("all_ab", {"all": [A, B]}), consumer("any_ab", {"any": [A, B]}))
    expected_all, have = 0, set()
    for i, uri in enumerate(order):
        emit(sim, uri, key=f"k{i}", now=at(i))
        emit(sim, uri, key=f"k{i}", now=at(i))  # a retry: nothing new
        if uri in (A, B):
            have.add(uri)
            if have == {A, B}:
                expected_all, have = expected_all + 1, set()
    assert len(asset_runs(sim, "all_ab")) == expected_all
    assert len(asset_runs(sim, "any_ab")) == sum(u in (A, B) for u in order)
    for dag_id in ("all_ab", "any_ab"):
        carried = [
            e["id"] for r in asset_runs(sim, dag_id) for e in json.loads(r.asset_events_json)
        ]
        assert len(carried) == len(set(carried))
    assert sim.state.digest() == sim.state.recompute_digest()


def test_spec_bounds_are_checked_at_register() -> None:
    from raftsched.core.validate_specs import check_spec

    many = tuple(f"s3://{i}" for i in range(ac.MAX_ASSETS_PER_DAG + 1))
    for bad in (
        dag("p", task("t", outlets=("has space",))),
        dag("p", task("t", outlets=many)),
        dag("p", task("t", inlets=many[:60]), task("u", outlets=many[60:])),
        replace(dag("p", task("t")), asset_condition='{"all":[]}'),
    ):
        with pytest.raises(LimitExceeded):
            check_spec(bad)
    check_spec(consumer("ok", {"all": [A, {"any": [B, "s3://c"]}]}))


def test_a_rewritten_or_removed_consumer_keeps_no_stale_queue() -> None:
    sim = asset_sim(consumer("c", {"all": [A, B]}))
    emit(sim, A)
    emit(sim, "s3://c", now=at(1))
    assert set(sim.state.assets.queued("c")) == {A}
    assert sim.register(consumer("c", {"all": [B, "s3://c"]}), now=at(2)).ok  # A dropped
    assert sim.state.assets.queued("c") == {}
    emit(sim, B, now=at(3))
    assert set(sim.state.assets.queued("c")) == {B}  # the consumer index follows the spec
    assert sim.apply(c.RemoveDags(request_id=sim.rid(), now=at(4), dag_ids=("c",))).ok
    assert sim.state.assets.queued("c") == {}
    emit(sim, "s3://c", now=at(5))  # a removed DAG consumes nothing
    assert sim.state.assets.queued("c") == {} and asset_runs(sim, "c") == []
    assert sim.state.digest() == sim.state.recompute_digest()


# -- a task's own extras (outlet_events, Metadata) -----------------------------------------------


def test_a_producers_outlet_extras_ride_on_its_events_and_reach_the_consumers_run() -> None:
    sim = three_dags()
    sim.create("producer")
    (grant,) = [g for g in sim.lease(n=10, now=at(5)) if g.lease.key.task_id == "make"]
    extras = ((A, '{"rows":3}'), ("s3://bucket/not-an-outlet", '{"x":1}'))
    assert sim.complete(grant, now=at(5), outlet_extras=extras).ok
    (all_run,) = asset_runs(sim, "all_ab")
    events = {e["uri"]: e for e in json.loads(all_run.asset_events_json)}
    assert events[A]["extra_json"] == '{"rows":3}'
    assert events[B]["extra_json"] == "{}"  # no extra set: an empty one
    assert sim.state.assets.events("s3://bucket/not-an-outlet") == ()  # not an outlet
    assert [e.extra_json for e in sim.state.assets.events(A)] == ['{"rows":3}']


def test_outlet_extras_are_checked_before_apply() -> None:
    def check(extras: object) -> None:
        check_command(
            c.CompleteAttempt(
                request_id="r",
                now=T0,
                key=TaskKey("d", "r", "t"),
                token=1,
                success=True,
                outlet_extras=extras,
            )
        )

    check(((A, '{"a":1}'), (B, "{}")))
    for bad in (
        [(A, "{}")],  # not a tuple
        ((A, "[1]"),),  # not an object
        ((A, '{"a": "' + "v" * 5_000 + '"}'),),  # past 4 KiB
        ((A, "[" * 20 + "]" * 20),),  # too deep
        ((B, "{}"), (A, "{}")),  # not sorted
        ((A, "{}"), (A, "{}")),  # twice
        (("no space", "{}"),),
        ((A, "{}", "x"),),
        tuple((f"s3://b/{i}", "{}") for i in range(101)),
        tuple((f"s3://b/{i:03}", '{"a":"' + "v" * 4_000 + '"}') for i in range(20)),  # > 64 KiB
    ):
        with pytest.raises(LimitExceeded):
            check(bad)


def test_hostile_outlet_extras_at_apply_are_ignored_not_fatal() -> None:
    """An entry no check saw (an older node's log, a bug) must not break apply."""
    from raftsched.core.handlers_assets import extras_by_uri

    uris = frozenset({A, B})
    assert extras_by_uri(None, uris) == {}
    assert extras_by_uri([(A, "{}")], uris) == {}
    assert extras_by_uri(((A, 1), (B, '{"b":1}'), ("x",), None), uris) == {B: '{"b":1}'}
    assert extras_by_uri((("s3://other", "{}"),), uris) == {}


def test_outlet_extras_are_refused_by_the_gate_before_release_3() -> None:
    cmd = c.CompleteAttempt(
        request_id="r",
        now=T0,
        key=TaskKey("d", "r", "t"),
        token=1,
        success=True,
        outlet_extras=((A, "{}"),),
    )
    assert vs.refusal(cmd, 2)
    assert not vs.refusal(replace(cmd, outlet_extras=()), 2)


# -- asset watchers: a trigger bound to an asset ------------------------------------------------

W = "file:///landing/w.csv"
WATCH_ARGS = '{"filepath":"/landing/w.csv","poke_interval":1.0,"stable_for":0.0}'


def watched(dag_id: str = "watched", name: str = "landing", args: str = WATCH_ARGS) -> object:
    """A DAG scheduled on W, with a file watcher on it."""
    spec = consumer(dag_id, W)
    return replace(spec, asset_watchers=aw.canonical_json([(W, name, "file", args)]))


def lease_triggers(sim: Sim, now=T0, who: str = "t1") -> list[dict]:
    cmd = c.LeaseTriggers(request_id=sim.rid(), now=now, triggerer_id=who, max_triggers=100)
    result = sim.apply(cmd)
    assert result.ok, result
    return list(result.value)


def fire(sim: Sim, grant: dict, event: str = '{"identity":"1:2:3"}', now=T0, who="t1", error=""):
    key = TaskKey(grant["dag_id"], grant["run_id"], grant["task_id"])
    firing = c.TriggerFiring(c.TriggerRef(key, grant["token"]), event, error)
    return sim.apply(
        c.FireTriggers(request_id=sim.rid(), now=now, triggerer_id=who, firings=(firing,))
    )


def test_a_watcher_is_held_while_its_dag_declares_it() -> None:
    sim = asset_sim(watched())
    (trigger,) = list(sim.state.triggers.triggers())
    assert aw.is_watcher(trigger) and trigger.kwargs_json == W and trigger.kind == "file"
    assert json.loads(trigger.args_json)["after"] == ""  # any version of the file
    assert sim.register(watched()).ok  # the same spec: nothing changes
    assert len(sim.state.triggers) == 1
    other = '{"filepath":"/landing/other.csv","poke_interval":1.0,"stable_for":0.0}'
    assert sim.register(watched(args=other)).ok  # another trigger: replaced
    (trigger,) = list(sim.state.triggers.triggers())
    assert "other.csv" in trigger.args_json
    assert sim.register(consumer("watched", W)).ok  # declared no more: dropped
    assert not sim.state.triggers
    assert sim.register(watched()).ok
    assert sim.apply(c.RemoveDags(request_id=sim.rid(), now=T0, dag_ids=("watched",))).ok
    assert not sim.state.triggers  # its DAG left: dropped


def test_each_firing_is_one_event_and_one_run_and_the_watcher_re_arms() -> None:
    sim = asset_sim(watched())
    (grant,) = lease_triggers(sim)
    result = fire(sim, grant, now=at(1))
    assert result.ok and result.value[0].ok, result
    (run,) = asset_runs(sim, "watched")
    (event,) = json.loads(run.asset_events_json)
    assert json.loads(event["extra_json"]) == {
        "from_trigger": True,
        "payload": {"identity": "1:2:3"},
    }
    assert event["actor"] == "watcher landing"
    again = fire(sim, grant, now=at(2))  # a repeat, or a stale triggerer's: refused
    assert not again.value[0].ok and len(asset_runs(sim, "watched")) == 1
    (trigger,) = list(sim.state.triggers.triggers())
    assert trigger.token == 0 and trigger.triggerer_id == ""  # re-armed, unleased
    assert json.loads(trigger.args_json)["after"] == "1:2:3"  # this version fired already
    (grant2,) = lease_triggers(sim, now=at(3), who="t2")
    assert grant2["token"] > grant["token"]
    assert fire(sim, grant2, '{"identity":"1:9:3"}', now=at(4), who="t2").value[0].ok
    assert len(asset_runs(sim, "watched")) == 2
    restored = SchedulerState.restore(pickle.loads(pickle.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()


def test_a_watcher_that_raises_emits_nothing_and_waits_before_it_is_leased_again() -> None:
    sim = asset_sim(watched())
    (grant,) = lease_triggers(sim)
    assert fire(sim, grant, "null", now=at(1), error="Traceback...\nOSError: boom").value[0].ok
    assert not asset_runs(sim, "watched") and sim.state.assets.events(W) == ()
    assert lease_triggers(sim, now=at(2)) == []
    assert len(lease_triggers(sim, now=at(1 + int(aw.ERROR_PAUSE_SECONDS)))) == 1


def test_a_huge_payload_is_an_event_without_it() -> None:
    sim = asset_sim(watched())
    (grant,) = lease_triggers(sim)
    assert fire(sim, grant, json.dumps({"body": "x" * 5_000}), now=at(1)).value[0].ok
    (event,) = sim.state.assets.events(W)
    assert event.extra_json == aw.FROM_TRIGGER


def test_watchers_are_checked_with_the_spec() -> None:
    good = watched()
    check_command(c.RegisterDags(request_id="r", now=T0, specs=(good,)))
    bad_texts = [
        "[]",
        "{}",
        "not json",
        aw.canonical_json([("s3://not/scheduled", "n", "file", "{}")]),
        aw.canonical_json([(W, "", "file", "{}")]),
        aw.canonical_json([(W, "n", "bad kind!", "{}")]),
        aw.canonical_json([(W, "n", "file", "[1]")]),
        aw.canonical_json([(W, "n", "file", "{" * 30)]),
        aw.canonical_json([(W, f"n{i:02}", "file", "{}") for i in range(11)]),
        '[["' + W + '","b","file","{}"],["' + W + '","a","file","{}"]]',  # not sorted
        '[["' + W + '","a","file","{}", 1]]',
    ]
    for text in bad_texts:
        spec = replace(good, asset_watchers=text, spec_hash="")
        result = asset_sim().register(spec)
        assert not result.value[0].ok, text
    spec = replace(good, spec_hash="")
    assert vs.refusal(c.RegisterDags(request_id="r", now=T0, specs=(spec,)), 2)


def test_a_rebuild_from_the_db_holds_the_active_dags_watchers_again() -> None:
    from raftsched.store.rebuild_assets import watcher_triggers

    spec = replace(watched(), spec_hash="")
    data = spec.to_dict()
    dags = [{"dag_id": "watched", "spec_hash": "h", "active": True}]
    table = watcher_triggers({"h": data}, dags, T0)
    assert table is not None
    sim = asset_sim(watched())
    assert table == sim.state.triggers.to_dict()  # as the register's apply holds them
    assert watcher_triggers({"h": data}, [{**dags[0], "active": False}], T0) is None


def test_an_assets_view_names_its_watchers() -> None:
    from raftsched.core.asset_views import summaries

    sim = asset_sim(watched())
    (summary,) = summaries(sim.state, W)
    assert summary["watchers"] == ["watched.landing (file)"]
    assert summary["consumers"] == ["watched"]


def test_a_watcher_text_no_check_saw_never_breaks_sync() -> None:
    sim = asset_sim()
    for text in ('["ab"]', "[1]", "not json", '[["a","b","c"]]', '[["a","b","c",4]]', "{}"):
        aw.sync(sim.state, "d", "", text, "/f.py", T0)
        aw.sync(sim.state, "d", text, "", "/f.py", T0)
    assert not sim.state.triggers
