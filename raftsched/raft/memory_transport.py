"""Raft messages as data: an in-memory network for N ``RaftNode``s in one thread.

:class:`MemoryNetwork` carries every message between the nodes of one process; the caller
decides when time passes and what the network does to each message, from a seed:

- ``delay=(low, high)``: each message arrives after a uniform draw in that range (seconds on
  the caller's clock); two messages of one link may overtake each other (reorder).
- ``loss``: the share of messages dropped; ``duplication``: the share delivered twice.
- ``partition(*groups)``: messages between different groups are dropped silently (as an
  iptables DROP, not a closed connection); ``heal()`` ends it.
- ``deliver(now)`` hands every message due at ``now`` to its receiver, in the order of their
  arrival times (ties: the order they were sent). Nothing happens on its own: no thread, no
  socket, no clock read.

A message is pickled when sent and unpickled when delivered (so sender and receiver never
share an object, and what travels is what TCP would carry). The same seed and the same calls
give the same deliveries. :class:`MemoryTransport` is the pysyncobj ``Transport`` of one node
on such a network, with our patches (:class:`~raftsched.raft.transport.PatchedTransport`);
give it to :class:`~raftsched.raft.node.RaftNode` with ``transport=network.transport``.
"""

from __future__ import annotations

import heapq
import pickle
import random
from collections.abc import Iterable
from typing import Any

from pysyncobj.transport import Transport

from raftsched.raft.transport import PatchedTransport


class MemoryNetwork:
    def __init__(
        self,
        seed: int,
        *,
        delay: tuple[float, float] = (0.001, 0.005),
        loss: float = 0.0,
        duplication: float = 0.0,
    ) -> None:
        self.random = random.Random(seed)
        self.delay = delay
        self.loss = loss
        self.duplication = duplication
        self.now = 0.0
        self._transports: dict[str, MemoryTransport] = {}
        self._in_flight: list[tuple[float, int, str, str, bytes]] = []
        self._sent = 0
        self._groups: list[frozenset[str]] = []
        self.delivered = 0
        self.dropped = 0

    def transport(self, engine: Any, self_node: Any, other_nodes: Iterable[Any]) -> MemoryTransport:
        """The transport factory a RaftNode takes (pysyncobj's ``transportClass`` signature)."""
        made = MemoryTransport(engine, self_node, other_nodes, network=self)
        self._transports[str(self_node.id)] = made
        return made

    def partition(self, *groups: Iterable[str]) -> None:
        """Drop every message between members of different ``groups`` (Raft addresses; an
        address in no group is cut off from everyone)."""
        self._groups = [frozenset(group) for group in groups]

    def heal(self) -> None:
        self._groups = []

    def _cut(self, src: str, dst: str) -> bool:
        if not self._groups:
            return False
        return not any(src in group and dst in group for group in self._groups)

    def send(self, src: str, dst: str, message: Any) -> None:
        if self.random.random() < self.loss:
            self.dropped += 1
            return
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        copies = 2 if self.random.random() < self.duplication else 1
        for _ in range(copies):
            at = self.now + self.random.uniform(*self.delay)
            self._sent += 1
            heapq.heappush(self._in_flight, (at, self._sent, src, dst, data))

    def deliver(self, now: float) -> int:
        """Deliver every message due at ``now`` (its receiver handles it at once); how many."""
        self.now = max(self.now, now)
        count = 0
        while self._in_flight and self._in_flight[0][0] <= self.now:
            _, _, src, dst, data = heapq.heappop(self._in_flight)
            receiver = self._transports.get(dst)
            if receiver is None or receiver.closed or self._cut(src, dst):
                self.dropped += 1
                continue
            receiver.receive(src, pickle.loads(data))
            count += 1
        self.delivered += count
        return count

    @property
    def next_arrival(self) -> float | None:
        return self._in_flight[0][0] if self._in_flight else None


class MemoryLink(Transport):
    """One node's end of a :class:`MemoryNetwork`, as pysyncobj's ``Transport``: every member
    counts as connected (a partition drops messages silently, it does not disconnect)."""

    def __init__(
        self, engine: Any, self_node: Any, other_nodes: Iterable[Any], *, network: MemoryNetwork
    ) -> None:
        super().__init__(engine, self_node, other_nodes)
        self._syncObj = engine
        self._self = self_node
        self._nodes = {str(node.id): node for node in other_nodes}
        self._network = network
        self._ready = False
        self.closed = False

    @property
    def ready(self) -> bool:
        return self._ready

    def tryGetReady(self) -> None:
        if not self._ready:
            self._ready = True
            for node in list(self._nodes.values()):
                self._onNodeConnected(node)

    def addNode(self, node: Any) -> None:
        self._nodes[str(node.id)] = node
        self._onNodeConnected(node)

    def dropNode(self, node: Any) -> None:
        self._nodes.pop(str(node.id), None)

    def send(self, node: Any, message: Any) -> bool:
        if self.closed:
            return False
        self._network.send(str(self._self.id), str(node.id), message)
        return True

    def receive(self, src: str, message: Any) -> None:
        node = self._nodes.get(src)
        if node is not None:
            self._onMessageReceived(node, message)

    def destroy(self) -> None:
        self.closed = True


class MemoryTransport(PatchedTransport, MemoryLink):
    """A :class:`MemoryLink` with our patches, as a scheduler node's TCP transport has them."""
