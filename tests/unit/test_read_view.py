"""The read view (raftsched/cluster/read_view.py): one applied index per answer, indexes that
page like a full scan would, and reads that never wait for the apply lock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from test_state_harness import T0, Sim, dag, task

from raftsched.api.gen import dag_pb2
from raftsched.api.servicers.context import ApiContext
from raftsched.api.servicers.dags import DagServicer
from raftsched.cluster.read_view import ReadViews, run_order
from raftsched.core import commands as c
from raftsched.core.model import RunType, TaskState

JOIN = 30.0  # seconds: a bound on waiting for a reader thread, never a measured time


class ListeningNode:
    """What ReadViews and the DagService use of SchedulerNode: ``read`` under the lock that
    apply holds, apply listeners called after each command under that lock (as the node
    does), and the node's identity."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.lock = threading.RLock()
        self.listeners: list[Callable[[int, Any, Any], None]] = []
        self.leader_address = "127.0.0.1:7101"
        self.settings = SimpleNamespace(self_address="127.0.0.1:7101")

    def read(self, fn: Callable[[Any], Any]) -> Any:
        with self.lock:
            return fn(self.sim.state)

    def add_apply_listener(self, listener: Callable[[int, Any, Any], None]) -> None:
        self.listeners.append(listener)

    def apply(self, fn: Callable[[Sim], Any]) -> Any:
        with self.lock:
            result = fn(self.sim)
            for listener in self.listeners:
                listener(self.sim.index, None, result)
        return result


def populated() -> ListeningNode:
    sim = Sim()
    specs = [
        dag(f"d{i:02d}", task("t"), tags=("even",) if i % 2 == 0 else ("odd",)) for i in range(12)
    ]
    sim.register(*specs)
    sim.apply(c.SetPaused(request_id=sim.rid(), now=T0, dag_id="d03", paused=True))
    for i in range(6):
        sim.create("d01", T0 + timedelta(days=i))
        sim.create("d02", T0 + timedelta(days=i, hours=1), run_type=RunType.MANUAL)
    sim.run_task("t")  # one run succeeds: several states to filter on
    return ListeningNode(sim)


def test_a_view_is_one_applied_index_and_pages_like_a_full_scan() -> None:
    node = populated()
    view = ReadViews(node).get()
    state = node.sim.state
    assert view.index == state.applied_index
    assert sorted(view.dags) == sorted(state.dags)
    # DAG pages, with every filter, walk the same DAGs as a sorted scan of the state
    for paused in (None, True, False):
        for tags in ((), ("even",)):
            expected = [
                rec.dag_id
                for rec in sorted(state.dags.values(), key=lambda r: r.dag_id)
                if (paused is None or rec.paused == paused) and set(tags) <= set(rec.spec.tags)
            ]
            walked, after = [], ""
            while True:
                page = view.dag_page(after=after, limit=3, paused=paused, tags=tags)
                assert page.total == len(expected)
                walked += [rec.dag_id for rec in page.dags]
                if len(page.dags) < 3:
                    break
                after = page.dags[-1].dag_id
            assert walked == expected
    # runs in list order, by DAG and state, from any cursor
    every = sorted(state.runs(), key=run_order)
    assert [r.run_id for r in view.iter_runs()] == [r.run_id for r in every]
    states = {str(r.state) for r in every}
    assert len(states) >= 2
    for dag_id in (None, "d01", "d02"):
        for wanted in ((), tuple(states), (sorted(states)[0],)):
            expected = [
                r.run_id
                for r in every
                if (dag_id is None or r.dag_id == dag_id) and (not wanted or r.state in wanted)
            ]
            got = [r.run_id for r in view.iter_runs(dag_id, states=wanted)]
            assert got == expected
            if len(expected) > 2:
                cursor = run_order(view.run(dag_id or every[0].dag_id, expected[1]) or every[1])
                after = [r.run_id for r in view.iter_runs(dag_id, states=wanted, after=cursor)]
                assert after == [
                    r.run_id
                    for r in every
                    if run_order(r) > cursor
                    and (dag_id is None or r.dag_id == dag_id)
                    and (not wanted or r.state in wanted)
                ]
    for run in every:
        assert [ti.key for ti in view.task_instances(run.dag_id, run.run_id)] == [
            ti.key for ti in state.task_instances(run.dag_id, run.run_id)
        ]


def test_a_view_is_a_copy_that_apply_does_not_change() -> None:
    node = populated()
    view = ReadViews(node).get()
    before = [(r.run_id, r.state) for r in view.iter_runs("d01")]
    index = view.index
    target = view.runs_of("d01")[0]
    mark = c.MarkTasks(
        request_id="mark-1",
        now=T0,
        dag_id="d01",
        run_id=target.run_id,
        task_ids=("t",),
        state=TaskState.FAILED,
    )
    assert node.apply(lambda sim: sim.apply(mark)).ok
    live = node.sim.state.run("d01", target.run_id)
    assert live is not None and (live.run_id, live.state) not in before  # apply changed it
    assert view.index == index
    assert [(r.run_id, r.state) for r in view.iter_runs("d01")] == before


def test_a_read_asking_for_a_newer_index_gets_a_view_at_it() -> None:
    node = populated()
    views = ReadViews(node, max_age=3600.0)  # only a read-your-writes demand rebuilds
    first = views.get()
    node.apply(lambda sim: sim.create("d05", T0 + timedelta(days=1)))
    wanted = node.sim.state.applied_index
    assert views.get().index in (first.index, wanted)  # may be reused: nobody asked for more
    fresh = views.get(min_index=wanted)
    assert fresh.index == wanted and fresh.runs_of("d05")


def test_reads_answer_from_the_published_view_while_apply_holds_the_lock() -> None:
    node = populated()
    ctx = ApiContext(node=node, proposer=None, api=None)  # type: ignore[arg-type]
    servicer = DagServicer(ctx)
    published = ctx.view()  # the view as of the last apply
    answers: list[Any] = []
    holding, release = threading.Event(), threading.Event()

    def long_apply() -> None:  # the tick thread in the middle of a long apply
        with node.lock:
            holding.set()
            release.wait(JOIN)

    def reader() -> None:
        request = dag_pb2.ListDagsRequest(page_size=5, recent_runs=3)
        answers.append(servicer.ListDags(request, None))
        answers.append(ctx.applied_through())

    applier = threading.Thread(target=long_apply)
    applier.start()
    try:
        assert holding.wait(JOIN)
        thread = threading.Thread(target=reader)
        thread.start()
        thread.join(JOIN)
        finished = not thread.is_alive()
    finally:
        release.set()
        applier.join(JOIN)
    assert finished, "a read waited for the apply lock"
    response, applied = answers
    assert response.freshness.applied_index == published.index == applied
    assert [d.dag_id for d in response.dags] == ["d00", "d01", "d02", "d03", "d04"]
    assert response.total_size == 12 and response.next_page_token == "d04"
    assert [r.run_id for r in response.dags[1].recent_runs] == [
        r.run_id for r in published.runs_of("d01")[:3]
    ]


@pytest.mark.parametrize("paused", [True, False])
def test_list_dags_filters_through_the_servicer(paused: bool) -> None:
    node = populated()
    servicer = DagServicer(ApiContext(node=node, proposer=None, api=None))  # type: ignore[arg-type]
    request = dag_pb2.ListDagsRequest(page_size=100, paused=paused, search="d0")
    response = servicer.ListDags(request, None)
    expected = [f"d{i:02d}" for i in range(10) if (i == 3) == paused]
    assert [d.dag_id for d in response.dags] == expected
    assert response.total_size == len(expected)
    assert response.freshness.applied_index == node.sim.state.applied_index
