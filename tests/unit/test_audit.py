"""The audit log (core.audit): given these commands with their actors, expect these records on
every replica, in the snapshot and the outbox; refused or actor-less commands record nothing,
a state without any record digests and snapshots as before, and the window stays bounded."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography.fernet import Fernet

from raftsched.core import commands as c
from raftsched.core import limits as lim
from raftsched.core.model import OutboxKind, RunType, TaskState
from raftsched.core.state import SchedulerState
from raftsched.core.versions import BASELINE_RELEASE as OLD
from raftsched.core.versions import RELEASE
from tests.unit.test_state_harness import T0, Sim, at, dag, task

TOKEN = Fernet(Fernet.generate_key()).encrypt(b"v").decode()


def _finalized() -> Sim:
    sim = Sim()
    assert sim.register(dag("d", task("a"), task("b", "a"))).ok
    assert sim.apply(c.SetClusterVersion(request_id=sim.rid(), now=T0, version=RELEASE)).ok
    return sim


def _manual(dag_id: str, day: int, run_id: str = "") -> c.RunDecision:
    logical = T0 + timedelta(days=day)
    return c.RunDecision(
        dag_id, logical, logical - timedelta(days=1), logical, RunType.MANUAL, {}, run_id
    )


def _records(state: SchedulerState) -> list[tuple[str, str, str, str, str]]:
    return [(r.actor, r.action, r.dag_id, r.run_id, r.detail) for r in state.audit]


def _every_audited_command(sim: Sim) -> None:
    rid, now = sim.rid, at(5)
    commands = [
        c.CreateRuns(request_id=rid(), now=now, runs=(_manual("d", 1),), actor="ann"),
        c.SetPaused(request_id=rid(), now=now, dag_id="d", paused=True, actor="ci"),
        c.SetPaused(request_id=rid(), now=now, dag_id="d", paused=False, actor="ci"),
        c.CreateRuns(
            request_id=rid(),
            now=now,
            runs=tuple(_manual("d", day, f"backfill__day{day}") for day in (2, 3)),
            actor="bob via web",
        ),
        c.ClearTasks(
            request_id=rid(), now=now, dag_id="d", run_id="manual__x", task_ids=(), actor="x"
        ),
        c.SetSecret(request_id=rid(), now=now, kind="variable", key="V", ciphertext=TOKEN),
        c.SetSecret(
            request_id=rid(), now=now, kind="connection", key="db", ciphertext=TOKEN, actor="ann"
        ),
        c.DeleteSecret(request_id=rid(), now=now, kind="connection", key="db", actor="ann"),
    ]
    for command in commands:
        sim.apply(command)
    run_id = next(iter(sim.state.audit)).run_id
    mark = c.MarkTasks(
        request_id=rid(),
        now=now,
        dag_id="d",
        run_id=run_id,
        task_ids=("a",),
        state=TaskState.FAILED,
        actor="ann",
    )
    clear = c.ClearTasks(
        request_id=rid(), now=now, dag_id="d", run_id=run_id, task_ids=("a",), actor="bob"
    )
    assert sim.apply(mark).ok and sim.apply(clear).ok


def test_each_change_records_its_actor_action_and_target() -> None:
    sim = _finalized()
    _every_audited_command(sim)
    run_id = f"manual__{(T0 + timedelta(days=1)).isoformat()}"
    assert _records(sim.state) == [
        ("ann", "trigger", "d", run_id, ""),
        ("ci", "pause", "d", "", ""),
        ("ci", "unpause", "d", "", ""),
        (
            "bob via web",
            "backfill",
            "d",
            "backfill__day2",
            "2 runs, 2024-01-03T00:00:00+00:00 .. 2024-01-04T00:00:00+00:00",
        ),
        # the clear of an unknown run was refused; the variable was set without an actor
        ("ann", "set_connection", "", "", "db"),
        ("ann", "delete_connection", "", "", "db"),
        ("ann", "mark_failed", "d", run_id, "a"),
        ("bob", "clear", "d", run_id, "a and downstream"),
    ]
    ids = [r.id for r in sim.state.audit]
    assert ids == list(range(1, 9))
    rows = [e.data for e in sim.state.outbox_after(0, 10_000) if e.kind is OutboxKind.AUDIT]
    assert [(row["id"], row["actor"], row["action"]) for row in rows] == [
        (r.id, r.actor, r.action) for r in sim.state.audit
    ]
    assert {row["log_index"] for row in rows} <= {index for _, index in sim.log}


def test_replicas_and_a_restored_snapshot_agree() -> None:
    one, two = _finalized(), _finalized()
    _every_audited_command(one)
    for command, index in one.log[len(two.log) :]:
        two.state.apply(command, log_index=index)
    assert one.state.digest() == two.state.digest() == one.state.recompute_digest()
    restored = SchedulerState.restore(one.state.snapshot())
    assert _records(restored) == _records(one.state)
    assert restored.digest() == one.state.digest()
    assert restored.audit.next_id == one.state.audit.next_id


def test_the_digest_sees_the_actor() -> None:
    one, two = _finalized(), _finalized()
    for sim, actor in ((one, "ann"), (two, "bob")):
        cmd = c.SetPaused(request_id="p", now=at(1), dag_id="d", paused=True, actor=actor)
        assert sim.apply(cmd).ok
    assert one.state.digest() != two.state.digest()


def test_without_an_actor_nothing_changes_in_digest_or_snapshot() -> None:
    plain, audited = Sim(), Sim()
    for sim in (plain, audited):
        sim.register(dag("d", task("a")))
        sim.apply(c.SetPaused(request_id="p", now=at(1), dag_id="d", paused=True))
    assert "audit" not in audited.state.snapshot()
    assert len(audited.state.audit) == 0
    assert plain.state.digest() == audited.state.digest()


def test_release_1_records_nothing() -> None:
    # The version gate refuses an actor until the upgrade is finished; the core holds the
    # same line should such an entry reach it, since a release-1 node would drop the field.
    sim = Sim()
    sim.register(dag("d", task("a")))
    cmd = c.SetPaused(request_id="p", now=at(1), dag_id="d", paused=True, actor="ann")
    assert sim.apply(cmd).ok
    assert len(sim.state.audit) == 0 and "audit" not in sim.state.snapshot()


def test_the_window_is_bounded_and_ids_go_on() -> None:
    sim = _finalized()
    for i in range(lim.MAX_AUDIT_RECORDS + 5):
        cmd = c.SetPaused(request_id=f"p{i}", now=at(1), dag_id="d", paused=bool(i % 2), actor="a")
        assert sim.apply(cmd).ok
    records = list(sim.state.audit)
    assert len(records) == lim.MAX_AUDIT_RECORDS
    assert (records[0].id, records[-1].id) == (6, lim.MAX_AUDIT_RECORDS + 5)
    assert sim.state.recompute_digest() == sim.state.digest()
    assert SchedulerState.restore(sim.state.snapshot()).digest() == sim.state.digest()


@pytest.mark.parametrize("actor", ["x" * (lim.MAX_ACTOR_CHARS + 1), "ann\x1b[31m", "a\nb", "\x00"])
def test_a_hostile_actor_is_refused_before_anything_changes(actor: str) -> None:
    sim = _finalized()
    cmd = c.SetPaused(request_id="p", now=at(1), dag_id="d", paused=True, actor=actor)
    result = sim.apply(cmd)
    assert not result.ok and "actor" in str(result.value)
    assert not sim.state.catalog.get("d").paused and len(sim.state.audit) == 0


def test_an_actor_waits_for_the_upgrade() -> None:
    """A release-1 node would drop the field: the gate refuses it while the cluster version is
    1, and the API node sends none until then (ApiContext.actor)."""
    from types import SimpleNamespace

    from raftsched.api import auth
    from raftsched.api.servicers.context import ApiContext
    from raftsched.core import versions as vs

    cmd = c.SetPaused(request_id="p", now=at(1), dag_id="d", paused=True, actor="ann")
    assert "actor" in (vs.refusal(cmd, OLD) or "") and vs.refusal(cmd, RELEASE) is None
    assert vs.refusal(c.SetPaused(request_id="p", now=at(1), dag_id="d", paused=True), OLD) is None

    made: list[c.Command] = []
    ctx = SimpleNamespace(
        proposer=SimpleNamespace(make=lambda cls, **kw: made.append(cls(now=T0, **kw))),
        node=SimpleNamespace(cluster_version=OLD),
    )
    ctx.actor = lambda: ApiContext.actor(ctx)  # type: ignore[attr-defined]
    with auth._as("", auth.Role.ADMIN, "ann via web"):
        ApiContext.make(ctx, c.SetPaused, "", dag_id="d", paused=True)  # type: ignore[arg-type]
        ctx.node.cluster_version = RELEASE
        ApiContext.make(ctx, c.SetPaused, "", dag_id="d", paused=True)  # type: ignore[arg-type]
        ApiContext.make(ctx, c.AckMaterialized, "", seq=1)  # type: ignore[arg-type]
    assert [getattr(m, "actor", None) for m in made] == ["", "ann via web", None]
