"""Three real RaftNodes in one thread: in-memory messages, virtual time, one seed.

The nodes are raftsched's RaftNode (pysyncobj with every patch of raftsched/raft) on a
MemoryNetwork, ticked by hand under virtual_time: no socket, no thread, no sleep. The same seed
gives the same history, message for message; a partition cuts the leader off and the
majority elects another leader and goes on committing.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from raftsched.raft.clock import VirtualClock, virtual_time
from raftsched.raft.memory_transport import MemoryNetwork
from raftsched.raft.node import RaftNode
from raftsched.raft.outcomes import FailReason
from raftsched.raft.settings import RaftSettings

ADDRESSES = ("10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001")
STEP = 0.005  # virtual seconds per round of ticks


class ListMachine:
    """A state machine that remembers what it applied, in order."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, Any]] = []
        self.lock = threading.Lock()

    def apply_entry(self, command: Any, log_index: int) -> Any:
        self.applied.append((log_index, command))
        return f"applied {command} at {log_index}"

    def snapshot_subject(self) -> tuple[Any, Any]:
        raise AssertionError("no snapshot in this test")

    def snapshot_refusal(self) -> str | None:
        return "no snapshot in this test"

    def restore_state(self, data: dict[str, Any]) -> None:
        raise AssertionError("no snapshot in this test")


def _instruments() -> Any:
    metric = SimpleNamespace(observe=lambda *_: None, inc=lambda *_: None)
    return SimpleNamespace(
        snapshot_pause=metric,
        snapshot_duration=metric,
        snapshot_failures=metric,
        note_leader=lambda term: None,
    )


class Simulation:
    def __init__(self, tmp_path: Path, seed: int, clock: VirtualClock, **network: Any) -> None:
        self.clock = clock
        self.network = MemoryNetwork(seed, **network)
        self.machines = {address: ListMachine() for address in ADDRESSES}
        self.nodes: dict[str, RaftNode] = {}
        self.trace: list[tuple[Any, ...]] = []
        for address in ADDRESSES:
            settings = RaftSettings(
                self_address=address,
                nodes=ADDRESSES,
                secret="",
                data_dir=tmp_path,
                durable_journal=False,
            )
            node = RaftNode(
                settings,
                self.machines[address],
                instruments=_instruments(),
                transport=self.network.transport,
                auto_tick=False,
            )
            node.start()
            node.add_role_listener(
                lambda role, a=address: self.trace.append((round(self.clock(), 3), a, role))
            )
            self.nodes[address] = node

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / STEP)):
            self.clock.advance(STEP)
            self.network.deliver(self.clock())
            for node in self.nodes.values():
                node.tick()

    def run_until(self, done: Any, limit: float = 30.0) -> None:
        end = self.clock() + limit
        while not done():
            assert self.clock() < end, "not within the time limit"
            self.run(STEP)

    def leaders(self, among: tuple[str, ...] = ADDRESSES) -> list[str]:
        return [a for a in among if self.nodes[a].is_leader]

    def propose(self, via: str, command: str) -> list[Any]:
        outcome: list[Any] = []
        self.nodes[via].propose(command, lambda result, reason: outcome.append((result, reason)))
        return outcome

    def history(self) -> list[tuple[Any, ...]]:
        applied = {a: list(m.applied) for a, m in self.machines.items()}
        return [*self.trace, *sorted(applied.items())]

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()


def _scenario(tmp_path: Path, seed: int) -> list[tuple[Any, ...]]:
    with virtual_time(VirtualClock(), seed) as clock:
        sim = Simulation(tmp_path, seed, clock, delay=(0.001, 0.01), duplication=0.05)
        try:
            sim.run_until(lambda: len(sim.leaders()) == 1)
            leader = sim.leaders()[0]
            follower = next(a for a in ADDRESSES if a != leader)
            outcomes = [sim.propose(leader, "a"), sim.propose(follower, "b")]
            sim.run_until(lambda: all(outcomes))
            assert [o[0][1] for o in outcomes] == [FailReason.SUCCESS, FailReason.SUCCESS]

            # The leader is cut off: the other two elect one of themselves and commit.
            rest = tuple(a for a in ADDRESSES if a != leader)
            sim.network.partition([leader], rest)
            sim.run_until(lambda: len(sim.leaders(rest)) == 1)
            late = sim.propose(sim.leaders(rest)[0], "c")
            sim.run_until(lambda: bool(late))
            assert late[0][1] == FailReason.SUCCESS
            sim.network.heal()

            def everyone_has_all() -> bool:
                return all(
                    [c for _, c in m.applied] == ["a", "b", "c"] for m in sim.machines.values()
                )

            sim.run_until(everyone_has_all)
            sim.run(1.0)
            assert everyone_has_all() and len(sim.leaders()) == 1
            return sim.history()
        finally:
            sim.close()


def test_three_nodes_elect_commit_and_fail_over_in_one_thread(tmp_path: Path) -> None:
    _scenario(tmp_path / "one", seed=7)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_same_seed_gives_the_same_history(tmp_path: Path, seed: int) -> None:
    first = _scenario(tmp_path / "first", seed)
    again = _scenario(tmp_path / "again", seed)
    assert first == again


class _Receiver:
    """What MemoryNetwork needs of a transport: ``receive`` and ``closed``."""

    closed = False

    def __init__(self) -> None:
        self.got: list[tuple[str, Any]] = []

    def receive(self, src: str, message: Any) -> None:
        self.got.append((src, message))


def _wire(network: MemoryNetwork) -> dict[str, _Receiver]:
    receivers = {a: _Receiver() for a in ("a", "b", "c")}
    network._transports.update(receivers)  # type: ignore[arg-type]
    return receivers


def test_the_network_delays_reorders_duplicates_drops_and_partitions_from_its_seed() -> None:
    def deliveries(seed: int) -> tuple[list[Any], int]:
        network = MemoryNetwork(seed, delay=(0.0, 0.1), loss=0.2, duplication=0.2)
        receivers = _wire(network)
        for i in range(50):
            network.send("a", "b", {"n": i})
        network.deliver(0.05)
        early = len(receivers["b"].got)
        network.deliver(1.0)
        assert 0 < early < len(receivers["b"].got)  # delays spread the arrivals
        return [m["n"] for _, m in receivers["b"].got], network.dropped

    got, dropped = deliveries(5)
    assert (got, dropped) == deliveries(5)  # the seed decides everything
    assert got != sorted(got)  # reordered
    assert len(set(got)) < 50 and dropped > 0  # lost
    assert len(got) > len(set(got))  # duplicated

    network = MemoryNetwork(1, delay=(0.001, 0.001))
    receivers = _wire(network)
    network.partition(["a"], ["b", "c"])
    message = {"type": "ping"}
    network.send("a", "b", message)
    network.send("b", "c", message)
    network.deliver(1.0)
    assert receivers["b"].got == [] and receivers["c"].got == [("b", message)]
    assert receivers["c"].got[0][1] is not message  # data, not a shared object
    network.heal()
    network.send("a", "b", message)
    network.deliver(2.0)
    assert receivers["b"].got == [("a", message)]
