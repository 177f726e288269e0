"""N real SchedulerNodes (core, Raft patches, durable-format journal) in one thread.

Messages travel on a :class:`MemoryNetwork`, time is a :class:`VirtualClock` (the caller
enters :func:`virtual_time`), and every node is ticked by :meth:`SimCluster.step`: nothing
runs unless the simulation says so, so one seed gives one history.

Journals are durable, fsynced when the seed says (:mod:`scripts.sim.power`). A crash closes a
node and drops it; its journal file stays as written (the page cache survives a process
crash); a power loss also cuts it back to its last fsync. A restart builds a new
SchedulerNode on the same directory, which replays it. Log compaction is off: pysyncobj's
snapshot writer forks, which a one-thread simulation cannot drive yet.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from raftsched.cluster.node import SchedulerNode
from raftsched.core import commands as c
from raftsched.raft.clock import VirtualClock
from raftsched.raft.memory_transport import MemoryNetwork
from raftsched.raft.outcomes import FailReason
from raftsched.raft.settings import RaftSettings
from scripts.sim.power import Disks

STEP = 0.03  # virtual seconds per round of ticks: the leader's heartbeat period
NEVER = 10**9  # compaction thresholds that are never reached


def addresses(size: int) -> tuple[str, ...]:
    return tuple(f"10.0.0.{i + 1}:7001" for i in range(size))


class SimCluster:
    def __init__(
        self, seed: int, data_dir: Path, clock: VirtualClock, disks: Disks, size: int = 3
    ) -> None:
        self.clock = clock
        self.disks = disks
        self.data_dir = data_dir
        self.addresses = addresses(size)
        self.network = MemoryNetwork(seed, delay=(0.001, 0.01))
        self.nodes: dict[str, SchedulerNode | None] = {}
        # address -> log index -> request id, as applied by the current incarnation (a
        # restarted node replays its journal into a fresh state, so it starts empty again)
        self.applied: dict[str, dict[int, str]] = {}
        self.on_apply: list[Callable[[str, int, Any, Any], None]] = []
        for address in self.addresses:
            self.start(address)

    def start(self, address: str) -> None:
        settings = RaftSettings(
            self_address=address,
            nodes=self.addresses,
            secret="",
            data_dir=self.data_dir,
            durable_journal=True,
            log_compaction_min_entries=NEVER,
            log_compaction_min_time=float(NEVER),
        )
        self.applied[address] = {}
        node = SchedulerNode(settings, transport=self.network.transport, auto_tick=False)
        node.add_apply_listener(
            lambda index, command, result, a=address: self._applied(a, index, command, result)
        )
        self.nodes[address] = node

    def _applied(self, address: str, index: int, command: Any, result: Any) -> None:
        self.applied[address][index] = getattr(command, "request_id", type(command).__name__)
        for listener in self.on_apply:
            listener(address, index, command, result)

    def crash(self, address: str) -> None:
        node = self.nodes.get(address)
        if node is not None:
            node.close()
            self.nodes[address] = None

    def power_loss(self, address: str) -> None:
        node = self.nodes.get(address)
        if node is not None:
            length = self.disks.synced_length(node)
            path = str(node.settings.journal_file)
            meta = Path(path + ".meta")
            saved = meta.read_bytes() if meta.exists() else None
            self.crash(address)  # closing writes the meta file: a power cut would not
            if saved is not None:
                meta.write_bytes(saved)
            self.disks.cut(path, length)

    def live(self) -> dict[str, SchedulerNode]:
        return {a: n for a, n in self.nodes.items() if n is not None}

    def leaders(self) -> list[str]:
        return [a for a, n in self.live().items() if n.raft.is_leader]

    def step(self) -> None:
        self.clock.advance(STEP)
        self.network.deliver(self.clock())
        self.disks.step(self.live())
        for node in self.nodes.values():
            if node is not None:
                node.raft.tick()

    def submit(self, address: str, command: c.Command) -> list[tuple[Any, int]]:
        """Propose through ``address``'s public path; the outcome lands in the returned list."""
        outcome: list[tuple[Any, int]] = []
        node = self.nodes.get(address)
        if node is None:
            outcome.append((None, FailReason.NOT_LEADER))
            return outcome
        node.submit(command, lambda result, reason: outcome.append((result, reason)))
        return outcome

    def close(self) -> None:
        for address in self.addresses:
            self.crash(address)
