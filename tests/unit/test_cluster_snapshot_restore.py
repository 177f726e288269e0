"""Snapshots of the real state machine on a real cluster (three nodes over real sockets).

A snapshot the forked writer takes while commands go on applying is the state at its index
(same digest as the node had right after applying that entry, recomputed from scratch too),
and a node restarted from it (snapshot + journal) agrees with the others at equal indexes,
also after every restored outbox entry has been acknowledged (the entries' digest share is
carried in the snapshot and checked as each one leaves: core/outbox.py).
"""

from __future__ import annotations

import gzip
import pickle
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from test_cluster_support import cluster_settings, wait_for
from test_state_harness import T0, dag, task

from raftsched.cluster.node import SchedulerNode
from raftsched.cluster.proposer import Proposer, new_request_id
from raftsched.core import commands as c
from raftsched.core.state import SchedulerState


class SlowSnapshotState(SchedulerState):
    """The real state, whose serialization takes a while, as a big one does."""

    def snapshot(self) -> dict[str, Any]:
        time.sleep(1.0)  # runs in the forked writer: the node goes on applying meanwhile
        return super().snapshot()


def leader_of(nodes: list[SchedulerNode]) -> SchedulerNode | None:
    leaders = [n for n in nodes if n.is_leader]
    return leaders[0] if len(leaders) == 1 else None


class Feeder:
    """Proposes a varied stream of real commands: new runs, leases, completions."""

    def __init__(self, proposer: Proposer) -> None:
        self.proposer = proposer
        self.slot = 0

    def step(self) -> None:
        self.slot += 1
        logical = T0 + timedelta(minutes=5 * self.slot)
        decision = c.RunDecision("d", logical, logical - timedelta(minutes=5), logical)
        now = T0 + timedelta(seconds=self.slot)
        self.propose(c.CreateRuns(request_id=new_request_id(), now=now, runs=(decision,)))
        lease = c.LeaseTasks(request_id=new_request_id(), now=now, worker_id="w", max_tasks=2)
        for grant in self.propose(lease).value or ():
            self.propose(
                c.CompleteAttempt(
                    request_id=new_request_id(),
                    now=now,
                    key=grant.lease.key,
                    token=grant.lease.token,
                    success=True,
                )
            )

    def propose(self, command: c.Command) -> Any:
        result = self.proposer.propose(command)
        assert result.ok, result
        return result


def snapshot_now(node: SchedulerNode) -> None:
    """Force a snapshot and wait for its file. A writer that fails (one stuck is killed after
    15 s: raft/snapshots.py, its stack in the log) is forced again: what this module checks
    is what a written snapshot holds; the writer's own failures are tested beside it."""
    node.raft.snapshot_writer.timeout, node.raft.snapshot_writer.retry_after = 15.0, 0.1
    node.raft.force_compaction()

    def written() -> bool:
        if node.settings.dump_file.exists():  # in place before the writer is reaped
            return True
        if not node.raft.snapshot_writer.running:  # not started yet, or failed: force (again)
            node.raft.force_compaction()
        return False

    wait_for(written, timeout=60, what="a snapshot file")


def agree(nodes: list[SchedulerNode]) -> bool:
    return len({node.digest() for node in nodes}) == 1


def test_snapshot_while_applying_is_the_state_at_its_index_and_a_restored_node_agrees(
    tmp_path: Path,
) -> None:
    nodes = [SchedulerNode(s, state_factory=SlowSnapshotState) for s in cluster_settings(tmp_path)]
    try:
        leader = wait_for(lambda: leader_of(nodes), timeout=20, what="a leader")
        feeder = Feeder(Proposer(leader, commit_timeout=2.0))
        spec = dag("d", task("a"), task("b", "a"), task("c", "b"), max_active_runs=1000)
        feeder.propose(c.RegisterDags(request_id=new_request_id(), now=T0, specs=(spec,)))
        for _ in range(3):
            feeder.step()
        victim = next(n for n in nodes if n is not leader)
        digests: dict[int, str] = {}  # log index -> the victim's digest right after it
        victim.add_apply_listener(
            lambda index, _cmd, _res: digests.__setitem__(index, victim._state.digest())
        )
        now_index, now_digest = victim.digest()  # the fork may come before any new entry
        digests[now_index] = now_digest
        stop = threading.Event()

        def keep_feeding() -> None:
            while not stop.wait(0.02):  # paced: the tick thread must find time to compact
                feeder.step()

        thread = threading.Thread(target=keep_feeding, daemon=True)
        thread.start()
        try:
            snapshot_now(victim)
            applied_when_written = victim.raft.last_applied
        finally:
            stop.set()
            thread.join(timeout=15)
        with gzip.open(victim.settings.dump_file, "rb") as src:
            payload = pickle.load(src)
        index = payload["raft"][0][1]  # the last entry applied when the writer forked
        restored = SchedulerState.restore(payload["state"])
        assert restored.applied_index == index
        assert restored.digest() == digests[index]
        assert restored.recompute_digest() == restored.digest()  # carried share checked
        assert applied_when_written > index  # the node applied on while the writer ran

        # a node restarted from that snapshot plus its journal agrees with the others
        wait_for(lambda: agree(nodes), timeout=15, what="all nodes at one index")
        settings = victim.settings
        victim.close()
        nodes.remove(victim)
        feeder.step()  # entries the restarted node gets from the leader
        restarted = SchedulerNode(settings, state_factory=SlowSnapshotState)
        nodes.append(restarted)
        wait_for(lambda: agree(nodes), timeout=30, what="the restarted node to agree")
        assert restarted.fatal_error is None
        state = restarted.read(lambda s: s)
        assert restarted.read(lambda s: s.recompute_digest() == s.digest())
        # every outbox entry it restored leaves by an ack, which recomputes its share: a
        # restored entry unlike the snapshotted one would now make the digests differ
        last_seq = leader.read(lambda s: s.outbox_last_seq)
        feeder.propose(c.AckMaterialized(request_id=new_request_id(), now=T0, seq=last_seq))
        feeder.step()
        wait_for(lambda: agree(nodes), timeout=15, what="all nodes to agree after the ack")
        assert restarted.read(lambda s: s.recompute_digest() == s.digest())
        assert state.outbox_acked_seq == last_seq
    finally:
        for node in nodes:
            node.close()
