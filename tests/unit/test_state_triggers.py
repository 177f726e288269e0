"""Deferred tasks and triggers in the state machine: defer, lease, renew, fire once, fencing,
expiry and re-lease, errors and timeouts, clear, bounds, snapshots and digests."""

from __future__ import annotations

import json

import pytest
from test_state_harness import T0, Sim, at, dag, task

from raftsched.core import commands as c
from raftsched.core import handlers_triggers as htr
from raftsched.core import results as r
from raftsched.core import trigger_table as tt
from raftsched.core.model import TaskKey
from raftsched.core.state import SchedulerState
from raftsched.core.validate import check_command
from raftsched.errors import LimitExceeded


def deferred_sim(timeout: float | None = None, retries: int = 0, **defer_kw) -> Sim:
    sim = Sim()
    assert sim.register(dag("d", task("a", retries=retries), task("b", "a"))).ok
    sim.create("d")
    (grant,) = sim.lease()
    result = defer(sim, grant, timeout_seconds=timeout, **defer_kw)
    assert result.ok, result
    return sim


def defer(sim: Sim, grant, now=T0, worker: str = "w1", **kw):
    kw.setdefault("kind", "file")
    kw.setdefault("args_json", '{"path": "/tmp/x"}')
    return sim.apply(
        c.DeferTask(
            request_id=sim.rid(),
            now=now,
            worker_id=worker,
            key=grant.lease.key,
            token=grant.lease.token,
            **kw,
        )
    )


def lease_triggers(sim: Sim, who: str = "t1", now=T0, ttl: float = 10.0, n: int = 100):
    result = sim.apply(
        c.LeaseTriggers(
            request_id=sim.rid(), now=now, triggerer_id=who, max_triggers=n, lease_ttl_seconds=ttl
        )
    )
    assert result.ok, result
    return list(result.value)


def ref(grant: dict) -> c.TriggerRef:
    key = TaskKey(grant["dag_id"], grant["run_id"], grant["task_id"])
    return c.TriggerRef(key, grant["token"])


def fire(sim: Sim, grant: dict, who: str = "t1", now=T0, event: str = '{"ok": 1}', error=""):
    return sim.apply(
        c.FireTriggers(
            request_id=sim.rid(),
            now=now,
            triggerer_id=who,
            firings=(c.TriggerFiring(ref(grant), event, error),),
        )
    )


def test_defer_frees_the_slot_and_holds_a_trigger() -> None:
    sim = deferred_sim(timeout=60)
    ti = sim.ti("a")
    assert sim.states() == {"a": "deferred", "b": "none"}
    assert sim.state.task_queue.running_count("d") == 0 and ti.lease is None
    assert ti.max_tries == 2  # the resume is not a retry
    (trigger,) = sim.state.triggers.triggers()
    assert (trigger.kind, trigger.try_number, trigger.timeout_at) == ("file", 1, at(60))
    rows = sim.outbox("task_instance")
    assert rows[-1]["state"] == "deferred" and rows[-1]["try_number"] == 1
    assert rows[-1]["worker_id"] == "w1"
    assert sim.run().state == "running"


def test_firing_resumes_once_with_the_event() -> None:
    sim = deferred_sim(method_name="done", kwargs_json='{"n": 2}')
    (grant,) = lease_triggers(sim)
    assert grant["kind"] == "file" and json.loads(grant["args_json"]) == {"path": "/tmp/x"}
    assert fire(sim, grant).value[0].ok
    assert sim.states()["a"] == "queued" and not sim.state.triggers
    again = fire(sim, grant)
    assert not again.value[0].ok and again.value[0].reason == htr.UNKNOWN_TRIGGER
    (resumed,) = sim.lease()
    assert resumed.try_number == 2 and resumed.max_tries == 2
    assert json.loads(resumed.resume_json) == {
        "event": {"ok": 1},
        "kwargs": {"n": 2},
        "method": "done",
    }
    assert sim.complete(resumed, worker_id="w1").ok
    assert sim.states() == {"a": "success", "b": "queued"}
    assert sim.ti("a").resume_json is None


def test_a_stale_or_foreign_triggerer_is_refused_and_expiry_re_leases() -> None:
    sim = deferred_sim()
    (first,) = lease_triggers(sim, "t1", ttl=5)
    assert lease_triggers(sim, "t2", now=at(1)) == []  # held by a live lease
    assert fire(sim, first, who="t2", now=at(1)).value[0].reason == r.WRONG_WORKER
    beat = sim.apply(
        c.HeartbeatTriggers(
            request_id=sim.rid(), now=at(4), triggerer_id="t1", triggers=(ref(first),)
        )
    )
    assert beat.value[0].ok and beat.value[0].value == at(14)
    assert lease_triggers(sim, "t2", now=at(10)) == []
    (second,) = lease_triggers(sim, "t2", now=at(14))  # t1 fell silent
    assert second["token"] > first["token"]
    assert fire(sim, first, now=at(15)).value[0].reason == r.STALE_TOKEN
    assert fire(sim, second, who="t2", now=at(15)).value[0].ok
    assert sim.states()["a"] == "queued"


def test_a_raising_trigger_fails_the_task_with_its_traceback_in_the_log() -> None:
    sim = deferred_sim()
    (grant,) = lease_triggers(sim)
    tb = "Traceback (most recent call last):\n  ...\nValueError: bad path"
    assert fire(sim, grant, error=tb).value[0].ok
    assert sim.states() == {"a": "failed", "b": "upstream_failed"}
    assert sim.ti("a").message == "trigger failed: ValueError: bad path"
    logs = [e["text"] for e in sim.outbox("task_log")]
    assert any("ValueError: bad path" in text for text in logs)
    assert sim.run().state == "failed"


def test_timeout_fails_the_attempt_and_retries_apply() -> None:
    sim = deferred_sim(timeout=30, retries=1)
    assert htr.timed_out(sim.state, at(29)) == []
    keys = tuple(htr.timed_out(sim.state, at(30)))
    early = sim.apply(c.TimeoutTriggers(request_id=sim.rid(), now=at(29), keys=keys))
    assert early.value[0].reason == r.NOT_DUE
    done = sim.apply(c.TimeoutTriggers(request_id=sim.rid(), now=at(30), keys=keys))
    assert done.value[0].ok
    ti = sim.ti("a")
    assert (str(ti.state), ti.max_tries, ti.message) == (
        "up_for_retry",
        2,
        "trigger timed out after 30 s",
    )
    assert not sim.state.triggers


def test_clear_and_mark_drop_the_trigger() -> None:
    sim = deferred_sim()
    (grant,) = lease_triggers(sim)
    sim.apply(c.ClearTasks(request_id=sim.rid(), now=T0, dag_id="d", run_id=grant["run_id"]))
    assert not sim.state.triggers and sim.states()["a"] == "queued"
    assert fire(sim, grant).value[0].reason == htr.UNKNOWN_TRIGGER
    sim2 = deferred_sim()
    sim2.apply(
        c.MarkTasks(
            request_id=sim2.rid(),
            now=T0,
            dag_id="d",
            run_id=grant["run_id"],
            task_ids=("a",),
            state="success",
        )
    )
    assert not sim2.state.triggers and sim2.states() == {"a": "success", "b": "queued"}


def test_only_the_lease_holder_defers() -> None:
    sim = Sim()
    assert sim.register(dag("d", task("a"))).ok
    sim.create("d")
    (grant,) = sim.lease()
    assert defer(sim, grant, worker="w2").reason == r.WRONG_WORKER
    assert sim.states()["a"] == "running" and not sim.state.triggers


def test_a_full_table_fails_the_deferral(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tt, "MAX_TRIGGERS_PER_DAG", 0)
    sim = Sim()
    assert sim.register(dag("d", task("a"))).ok
    sim.create("d")
    (grant,) = sim.lease()
    result = defer(sim, grant)
    assert result.ok and result.reason == htr.TOO_MANY_TRIGGERS
    assert sim.states()["a"] == "failed" and not sim.state.triggers


@pytest.mark.parametrize(
    "kw",
    [
        {"kind": ""},
        {"kind": "a b"},
        {"args_json": "[1]"},
        {"args_json": "{" * 40 + "}" * 40},
        {"args_json": json.dumps({"x": "y" * 20_000})},
        {"kwargs_json": "not json"},
        {"method_name": "a b"},
        {"timeout_seconds": 0.5},
        {"timeout_seconds": float("nan")},
    ],
)
def test_hostile_deferrals_are_refused_before_any_change(kw: dict) -> None:
    base = {"kind": "file", "args_json": "{}"}
    cmd = c.DeferTask(
        request_id="r",
        now=T0,
        worker_id="w1",
        key=TaskKey("d", "r", "a"),
        token=1,
        **{**base, **kw},
    )
    with pytest.raises(LimitExceeded):
        check_command(cmd)


def test_hostile_firings_are_refused() -> None:
    firing = c.TriggerFiring(c.TriggerRef(TaskKey("d", "r", "a"), 1), "x" * 10)
    cmd = c.FireTriggers(request_id="r", now=T0, triggerer_id="t", firings=(firing,))
    with pytest.raises(LimitExceeded):
        check_command(cmd)
    big = c.TriggerFiring(c.TriggerRef(TaskKey("d", "r", "a"), 1), json.dumps("y" * 70_000))
    with pytest.raises(LimitExceeded):
        check_command(c.FireTriggers(request_id="r", now=T0, triggerer_id="t", firings=(big,)))


def test_snapshot_round_trip_and_digests_agree() -> None:
    sim = deferred_sim(timeout=60)
    lease_triggers(sim)
    snap = sim.state.snapshot()
    assert "triggers" in snap
    back = SchedulerState.restore(json.loads(json.dumps(snap)))
    assert back.digest() == sim.state.digest() == sim.state.recompute_digest()
    (grant,) = lease_triggers(sim, now=at(20))
    fire(sim, grant, now=at(21))
    assert sim.state.digest() == sim.state.recompute_digest()
    assert "triggers" not in sim.state.snapshot()
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest()
    assert restored.task_instance(sim.ti("a").key).resume_json == sim.ti("a").resume_json


def test_replay_gives_the_same_digest() -> None:
    sim = deferred_sim(timeout=60)
    (grant,) = lease_triggers(sim)
    fire(sim, grant)
    replica = SchedulerState()
    for command, index in sim.log:
        replica.apply(command, log_index=index)
    assert replica.digest() == sim.state.digest()
