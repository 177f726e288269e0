"""Queue-aware leasing (`queue=` on tasks, `raftsched worker --queues`): a LeaseTasks command
leases only tasks of the queues it names (none: the default queue), in the one deterministic
order across those queues, within each DAG's max_active_tasks."""

from __future__ import annotations

import pickle

import pytest

from raftsched.core import commands as c
from raftsched.core.model import DEFAULT_QUEUE, TaskState
from raftsched.core.results import LeaseGrant
from raftsched.core.state import SchedulerState
from raftsched.core.validate import check_command, check_spec
from raftsched.errors import LimitExceeded
from tests.unit.test_state_harness import T0, Sim, at, dag, task


def _lease(
    sim: Sim, queues: tuple[str, ...] = (), n: int = 10, worker: str = "w1", now=T0
) -> list[LeaseGrant]:
    command = c.LeaseTasks(
        request_id=sim.rid(), now=now, worker_id=worker, max_tasks=n, queues=queues
    )
    check_command(command)
    result = sim.apply(command)
    assert result.ok, result
    return list(result.value)


def _ids(grants: list[LeaseGrant]) -> list[str]:
    return [g.lease.key.task_id for g in grants]


def _mixed() -> Sim:
    sim = Sim()
    sim.register(
        dag(
            "d",
            task("plain"),
            task("gpu1", queue="gpu"),
            task("gpu2", queue="gpu", priority_weight=5),
            task("io", queue="io", priority_weight=3),
        )
    )
    sim.create("d")
    return sim


def test_a_worker_without_queues_leases_only_the_default_queue() -> None:
    sim = _mixed()
    assert _ids(_lease(sim)) == ["plain"]
    assert _lease(sim) == []
    states = sim.states()
    assert states["gpu1"] == states["gpu2"] == states["io"] == TaskState.QUEUED
    assert sim.state.task_queue.queued_by_queue() == {"gpu": 2, "io": 1}


def test_a_worker_leases_only_its_queues_and_records_its_id() -> None:
    sim = _mixed()
    grants = _lease(sim, ("gpu",), worker="gpu-worker")
    assert _ids(grants) == ["gpu2", "gpu1"]  # priority_weight first, as ever
    assert {sim.ti(t).worker_id for t in ("gpu1", "gpu2")} == {"gpu-worker"}
    assert sim.states()["plain"] == sim.states()["io"] == TaskState.QUEUED


def test_order_across_queues_is_the_one_order_whatever_the_listing() -> None:
    orders = []
    for queues in (("gpu", "io", DEFAULT_QUEUE), (DEFAULT_QUEUE, "io", "gpu", "io")):
        sim = _mixed()
        orders.append(_ids(_lease(sim, queues)))
    assert orders[0] == orders[1] == ["gpu2", "io", "gpu1", "plain"]


def test_one_at_a_time_across_queues_follows_the_same_order() -> None:
    sim = _mixed()
    got = []
    while grants := _lease(sim, ("io", "gpu", DEFAULT_QUEUE), n=1):
        got.extend(_ids(grants))
    assert got == ["gpu2", "io", "gpu1", "plain"]


def test_max_active_tasks_holds_across_queues() -> None:
    sim = Sim()
    sim.register(dag("d", task("a", queue="qa"), task("b", queue="qb"), max_active_tasks=1))
    sim.create("d")
    [b] = _lease(sim, ("qb",))
    assert _lease(sim, ("qa",)) == []  # the DAG's one slot is taken by a task of another queue
    assert sim.complete(b, now=at(1)).ok
    assert _ids(_lease(sim, ("qa",), now=at(2))) == ["a"]


def test_a_released_task_goes_back_to_its_own_queue() -> None:
    sim = _mixed()
    [g2, g1] = _lease(sim, ("gpu",))
    refs = (c.LeaseRef(g1.lease.key, g1.lease.token),)
    assert sim.apply(
        c.ReleaseLeases(request_id=sim.rid(), now=at(1), worker_id="w1", leases=refs)
    ).ok
    assert _ids(_lease(sim, now=at(2))) == ["plain"]
    assert _ids(_lease(sim, ("gpu",), now=at(3))) == ["gpu1"]
    assert g2.lease.key.task_id == "gpu2"


def test_restore_rebuilds_the_queues_and_the_digest_agrees() -> None:
    sim = _mixed()
    restored = SchedulerState.restore(pickle.loads(pickle.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest() == sim.state.recompute_digest()
    assert restored.task_queue.queued_by_queue() == {DEFAULT_QUEUE: 1, "gpu": 2, "io": 1}
    sim.state = restored
    assert _ids(_lease(sim, ("io",))) == ["io"]


def test_the_default_queue_leaves_spec_dicts_and_hashes_as_they_were() -> None:
    plain = dag("d", task("a"))
    assert "queue" not in plain.to_dict()["tasks"][0]
    assert dag("d", task("a", queue=DEFAULT_QUEUE)).compute_hash() == plain.compute_hash()
    routed = dag("d", task("a", queue="gpu"))
    assert routed.to_dict()["tasks"][0]["queue"] == "gpu"
    assert routed.compute_hash() != plain.compute_hash()
    assert type(routed).from_dict(routed.to_dict()).tasks[0].queue == "gpu"


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 251])
def test_a_bad_queue_name_is_refused(name: str) -> None:
    with pytest.raises(LimitExceeded, match="queue"):
        check_spec(dag("d", task("a", queue=name)))
    command = c.LeaseTasks(request_id="r", now=T0, worker_id="w", queues=(name,))
    with pytest.raises(LimitExceeded, match="queues"):
        check_command(command)


def test_too_many_queues_are_refused() -> None:
    command = c.LeaseTasks(
        request_id="r", now=T0, worker_id="w", queues=tuple(f"q{i}" for i in range(65))
    )
    with pytest.raises(LimitExceeded, match="queues"):
        check_command(command)
