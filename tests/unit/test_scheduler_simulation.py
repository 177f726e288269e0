"""Three SchedulerNodes (the real core, the release gate, apply listeners) on an in-memory Raft
network, in one thread, from a seed: a DAG is registered, a run created, its task leased (the
lease's fencing token is its Raft log index) and completed, through different nodes; every
replica ends at the same applied index with the same digest, and the same seed replays it
exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_state_harness import T0, dag, task

from raftsched.cluster.node import SchedulerNode
from raftsched.core import commands as c
from raftsched.raft.clock import VirtualClock, virtual_time
from raftsched.raft.memory_transport import MemoryNetwork
from raftsched.raft.outcomes import FailReason
from raftsched.raft.settings import RaftSettings

ADDRESSES = ("10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001")
STEP = 0.005


def _run(tmp_path: Path, seed: int) -> tuple[list[Any], set[tuple[int, str]]]:
    with virtual_time(VirtualClock(), seed) as clock:
        network = MemoryNetwork(seed, delay=(0.001, 0.01), duplication=0.05)
        nodes = [
            SchedulerNode(
                RaftSettings(
                    self_address=address,
                    nodes=ADDRESSES,
                    secret="",
                    data_dir=tmp_path,
                    durable_journal=False,
                ),
                transport=network.transport,
                auto_tick=False,
            )
            for address in ADDRESSES
        ]

        def run_until(done: Any, limit: float = 30.0) -> None:
            end = clock() + limit
            while not done():
                assert clock() < end, "not within the time limit"
                clock.advance(STEP)
                network.deliver(clock())
                for node in nodes:
                    node.raft.tick()

        def commit(via: SchedulerNode, command: c.Command) -> Any:
            outcome: list[Any] = []
            via.submit(command, lambda result, reason: outcome.append((result, reason)))
            run_until(lambda: bool(outcome))
            result, reason = outcome[0]
            assert reason == FailReason.SUCCESS and result.ok, (result, reason)
            return result

        try:
            run_until(lambda: sum(n.is_leader for n in nodes) == 1)
            leader = next(n for n in nodes if n.is_leader)
            followers = [n for n in nodes if n is not leader]
            spec = dag("sim", task("only"))
            commit(followers[0], c.RegisterDags(request_id="r1", now=T0, specs=(spec,)))
            decision = c.RunDecision("sim", T0, T0, T0)
            commit(leader, c.CreateRuns(request_id="r2", now=T0, runs=(decision,)))
            lease = c.LeaseTasks(request_id="r3", now=T0, worker_id="w1", max_tasks=1)
            grants = commit(followers[1], lease).value
            assert len(grants) == 1
            token = grants[0].lease.token
            assert token == leader.raft.commit_index  # the fencing token is the entry's index
            done = c.CompleteAttempt(
                request_id="r4",
                now=T0,
                key=grants[0].lease.key,
                token=token,
                success=True,
                worker_id="w1",
            )
            commit(followers[0], done)
            last = leader.raft.commit_index
            run_until(lambda: all(n.raft.last_applied >= last for n in nodes))
            digests = {n.digest() for n in nodes}
            return [grants[0].lease.key, token, sorted(digests)], digests
        finally:
            for node in nodes:
                node.close()


def test_three_scheduler_nodes_agree_in_one_thread(tmp_path: Path) -> None:
    _, digests = _run(tmp_path, seed=11)
    assert len(digests) == 1, digests


@pytest.mark.parametrize("seed", [3])
def test_the_same_seed_replays_the_same_cluster(tmp_path: Path, seed: int) -> None:
    assert _run(tmp_path / "a", seed)[0] == _run(tmp_path / "b", seed)[0]
