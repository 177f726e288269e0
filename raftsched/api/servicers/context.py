"""What every servicer of one node shares: the Raft node, the proposer, the DB engine, limits.

Contract:

- :meth:`ApiContext.read` runs ``fn(state)`` under the node's apply lock and returns its value
  with the :class:`Freshness` of that same state (applied index taken under the same lock).
  Keep ``fn`` short and copy what it returns out of the state (the tick thread waits).
- :meth:`ApiContext.propose` commits one command through the :class:`Proposer`, using the
  request's ``request_id`` as the command's request id (a client retry is applied once), with a
  deadline bounded by the call's own. No quorum -> :class:`NoQuorumError` naming how many
  nodes are reachable (UNAVAILABLE), at once when this node has seen no leader with a quorum
  for :data:`NO_LEADER_WAIT` s (so the client tries another node); unknown outcome ->
  CommitTimeout (DEADLINE_EXCEEDED).
- :meth:`ApiContext.require_engine` is the metadata DB engine, or StoreUnavailable when this
  node has none (tests of the Raft part alone).
- API addresses: :mod:`raftsched.addresses` (Raft port + 200 unless ``[api] grpc_bind``).

Thread-safe: gRPC calls run on many threads at once; everything here is read-only or locked.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from raftsched.addresses import api_address_for
from raftsched.api.gen import common_pb2
from raftsched.api.status import StatusError, no_quorum
from raftsched.cluster.proposer import new_request_id
from raftsched.core.commands import Command
from raftsched.core.results import Result
from raftsched.errors import CommitTimeout, NoQuorumError, StoreUnavailable

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from raftsched.cluster.node import SchedulerNode
    from raftsched.cluster.proposer import Proposer
    from raftsched.config import ApiConfig
    from raftsched.core.state import SchedulerState

MAX_REQUEST_ID = 200  # characters
NO_LEADER_WAIT = 3.0  # seconds a write waits for a leader (an election) before UNAVAILABLE
T = TypeVar("T")
C = TypeVar("C", bound=Command)


@dataclass
class ApiContext:
    node: SchedulerNode
    proposer: Proposer
    api: ApiConfig
    engine: Engine | None = None
    secret: str = ""  # the Raft password (pysyncobj utility connections)
    default_lease_ttl: float = 30.0
    status: Callable[[], dict[str, Any]] | None = None  # NodeRuntime.status
    grpc_bind: str = ""  # as configured (may be empty)

    @property
    def node_id(self) -> str:
        return str(self.node.settings.self_address)

    # -- reads -------------------------------------------------------------------------------

    def freshness(self, applied_index: int | None = None) -> common_pb2.Freshness:
        if applied_index is None:
            applied_index = int(self.node.read(lambda st: st.applied_index))
        return common_pb2.Freshness(
            leader_id=self.node.leader_address or "",
            applied_index=int(applied_index),
            node_id=self.node_id,
        )

    def read(self, fn: Callable[[SchedulerState], T]) -> tuple[T, common_pb2.Freshness]:
        value, index = self.node.read(lambda st: (fn(st), int(st.applied_index)))
        return value, self.freshness(index)

    # -- writes ------------------------------------------------------------------------------

    def make(self, cls: type[C], request_id: str, **fields: Any) -> C:
        if len(request_id) > MAX_REQUEST_ID:
            raise StatusError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request_id is {len(request_id)} characters long: at most {MAX_REQUEST_ID}",
            )
        return self.proposer.make(cls, request_id=request_id or new_request_id(), **fields)

    def propose(self, command: Command, context: grpc.ServicerContext | None = None) -> Result:
        deadline = self.proposer.deadline
        remaining = _time_remaining(context)
        if remaining is not None:
            deadline = max(0.2, min(deadline, remaining - 0.5))
        waited_from = time.monotonic()
        if not self._await_leader(min(NO_LEADER_WAIT, deadline / 2)):
            raise self.no_quorum()  # fail fast: the client may try another node
        # The wait comes out of the budget: the answer must reach the caller before its deadline.
        deadline = max(0.2, deadline - (time.monotonic() - waited_from))
        try:
            return self.proposer.propose(command, deadline=deadline)
        except NoQuorumError:
            raise self.no_quorum() from None
        except CommitTimeout:
            if not self.has_leader():  # the quorum was lost while waiting
                raise self.no_quorum() from None
            raise

    def no_quorum(self) -> NoQuorumError:
        members = self.members()
        reachable = 1 + sum(1 for address, up in members.items() if up and address != self.node_id)
        return no_quorum(reachable, len(members))

    def members(self) -> dict[str, bool]:
        """Raft address of every member (this node first) -> connected to this node."""
        out = {self.node_id: True}
        for _ in range(5):  # the tick thread may change the sets meanwhile
            try:
                for peer in sorted(self.node.otherNodes, key=lambda n: n.id):
                    out[str(getattr(peer, "address", None) or peer.id)] = bool(
                        self.node.isNodeConnected(peer)
                    )
                return out
            except RuntimeError:
                out = {self.node_id: True}
        return out

    def _await_leader(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not self.has_leader():
            if time.monotonic() >= end:
                return False
            time.sleep(0.05)
        return True

    def has_leader(self) -> bool:
        return self.node.leader_address is not None and self.node.quorum

    # -- the metadata DB ---------------------------------------------------------------------

    def require_engine(self) -> Engine:
        if self.engine is None:
            raise StoreUnavailable("this node has no metadata database configured")
        return self.engine

    def peer_api(self, raft_address: str) -> str:
        return api_address_for(raft_address, self.grpc_bind)


def _time_remaining(context: grpc.ServicerContext | None) -> float | None:
    if context is None:
        return None
    with contextlib.suppress(Exception):
        remaining = context.time_remaining()
        if remaining is not None and remaining < 1e6:
            return float(remaining)
    return None
