"""What every servicer of one node shares: the Raft node, the proposer, the DB engine, limits.

Contract:

- :meth:`ApiContext.view` is how list and get queries read: the node's published
  :class:`~raftsched.cluster.read_view.ReadView` (an immutable copy at one applied index,
  with per-query indexes), at least at the index this call's caller has seen (the
  consistency interceptor's ``await_applied``/``read_index`` record it for the handler on
  the same thread). Build the page from it without any lock; answer with
  :meth:`view_freshness` (the view's own index: read-your-writes depends on it).
- :meth:`ApiContext.read` runs ``fn(state)`` under the node's apply lock and returns its value
  with the :class:`Freshness` of that same state (applied index taken under the same lock).
  Only for what a view does not hold (writes' pre-checks); keep ``fn`` short (the tick
  thread waits).
- :meth:`ApiContext.propose` commits one command through the :class:`Proposer`, using the
  request's ``request_id`` as the command's request id (a client retry is applied once), with a
  deadline bounded by the call's own. No quorum -> :class:`NoQuorumError` naming how many
  nodes are reachable (UNAVAILABLE), at once when this node has seen no leader with a quorum
  for :data:`NO_LEADER_WAIT` s (so the client tries another node); unknown outcome ->
  CommitTimeout (DEADLINE_EXCEEDED).
- :meth:`ApiContext.require_engine` is the metadata DB engine, or StoreUnavailable when this
  node has none (tests of the Raft part alone).
- API addresses: :mod:`raftsched.addresses` (Raft port + 200 unless ``[api] grpc_bind``).
- Consistency (:mod:`raftsched.api.consistency`, whose interceptor calls these before every
  handler): :meth:`ApiContext.await_applied` waits, bounded, until this replica has applied
  what the caller has seen; :meth:`ApiContext.read_index` commits a no-op through the leader
  so that a linearizable read sees every write completed before it.

Thread-safe: gRPC calls run on many threads at once; everything here is read-only or locked.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from raftsched.addresses import api_address_for
from raftsched.api.auth import caller_actor, caller_scope
from raftsched.api.consistency import CATCH_UP_WAIT
from raftsched.api.gen import common_pb2
from raftsched.api.status import no_quorum
from raftsched.cluster.proposer import new_request_id
from raftsched.cluster.read_view import ReadView, ReadViews
from raftsched.core.audit import AUDITED
from raftsched.core.commands import Batch, Command
from raftsched.core.persisted import SINCE_RELEASE
from raftsched.core.results import Result
from raftsched.errors import (
    CommitTimeout,
    NoQuorumError,
    RaftschedError,
    StatusError,
    StoreUnavailable,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from raftsched.cluster.node import SchedulerNode
    from raftsched.cluster.proposer import Proposer
    from raftsched.cluster.workers_seen import WorkersSeen
    from raftsched.config import ApiConfig
    from raftsched.core.state import SchedulerState

log = logging.getLogger(__name__)

MAX_REQUEST_ID = 200  # characters
NO_LEADER_WAIT = 3.0  # seconds a write waits for a leader (an election) before UNAVAILABLE
CATCH_UP_POLL = 0.01  # seconds between two looks at the applied index while catching up
READ_INDEX_WAIT = 0.5  # seconds of the catch-up wait kept for a last read-index round trip
MIN_READ_INDEX_WAIT = 0.05  # seconds: with less left, answer UNAVAILABLE at once
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
    # The node's sightings of workers and their queues (cluster/workers_seen.py); None: none
    workers_seen: WorkersSeen | None = None
    views: ReadViews = field(init=False, repr=False)
    # The index the current call's caller must see, per gRPC thread (set before the handler
    # by await_applied / read_index, taken by view()). A value left behind by a call whose
    # handler took no view is harmless: views only move forward.
    _wanted: threading.local = field(init=False, repr=False, default_factory=threading.local)

    def __post_init__(self) -> None:
        self.views = ReadViews(self.node)

    @property
    def node_id(self) -> str:
        return str(self.node.settings.self_address)

    # -- reads -------------------------------------------------------------------------------

    def view(self, min_index: int = 0) -> ReadView:
        """The published read view, at least at what this call's caller has seen (and at
        ``min_index``, e.g. a write's own index): never waits for apply, except to copy the
        state when the view is too old (see :class:`ReadViews`)."""
        wanted = max(min_index, int(getattr(self._wanted, "index", 0)))
        self._wanted.index = 0
        return self.views.get(wanted)

    def view_freshness(self, view: ReadView) -> common_pb2.Freshness:
        return self.freshness(view.index)

    def freshness(self, applied_index: int | None = None) -> common_pb2.Freshness:
        if applied_index is None:
            applied_index = self.views.applied_index()
        return common_pb2.Freshness(
            leader_id=self.node.leader_address or "",
            applied_index=int(applied_index),
            node_id=self.node_id,
        )

    def read(self, fn: Callable[[SchedulerState], T]) -> tuple[T, common_pb2.Freshness]:
        value, index = self.node.read(lambda st: (fn(st), int(st.applied_index)))
        return value, self.freshness(index)

    # -- consistency (README "Consistency") --------------------------------------------------

    def applied_through(self) -> int:
        """The Raft log index of the last command in this node's state: what every answer's
        ``freshness.applied_index`` says (pysyncobj's own no-op entries do not count, so
        every replica reaches every index a client can have seen). Taken without the apply
        lock (the interceptor stamps every answer with it)."""
        return self.views.applied_index()

    def await_applied(self, min_index: int, context: grpc.ServicerContext | None = None) -> bool:
        """Wait until this node applied ``min_index``: at most CATCH_UP_WAIT s, or the call's
        remaining deadline less a margin; the last READ_INDEX_WAIT s of it go to a read-index
        round trip, which makes this node catch up with everything committed. False once
        applied. True when even that leaves it below ``min_index``: no such index was ever
        committed here, so the caller saw an earlier cluster (re-created since): serve it.
        Otherwise (no quorum, too slow) a StatusError UNAVAILABLE, so the failover client
        tries the next node."""
        budget = CATCH_UP_WAIT
        remaining = _time_remaining(context)
        if remaining is not None:
            budget = max(0.0, min(budget, remaining - 0.3))
        started = time.monotonic()
        poll_until = started + max(0.0, budget - READ_INDEX_WAIT)
        while self.applied_through() < min_index:
            if time.monotonic() >= poll_until:
                reset = self._confirm_behind(min_index, started + budget - time.monotonic())
                if not reset:
                    self._wanted.index = min_index
                return reset
            time.sleep(CATCH_UP_POLL)
        self._wanted.index = min_index  # the handler's view must be at least there
        return False

    def _confirm_behind(self, min_index: int, time_left: float) -> bool:
        """After a read index (the cluster's whole committed log applied here): is this node
        still below ``min_index``? Raises the UNAVAILABLE answer when it cannot tell."""
        if time_left > MIN_READ_INDEX_WAIT and self.has_leader():
            try:
                self.read_index(max_wait=time_left)
            except (RaftschedError, StatusError) as err:  # no quorum, commit timed out
                log.info("read index to check index %d failed: %s", min_index, err)
            else:
                if self.applied_through() < min_index:
                    log.warning("a caller has seen index %d, beyond this cluster's log", min_index)
                    return True
                return False
        raise StatusError(
            grpc.StatusCode.UNAVAILABLE,
            f"node {self.node_id} has applied up to {self.applied_through()}, you have seen"
            f" {min_index}; retry (the client moves to another node)",
        )

    def read_index(
        self, context: grpc.ServicerContext | None = None, *, max_wait: float | None = None
    ) -> None:
        """A read-index round trip: commit a no-op (an empty Batch) through the leader; the
        proposer returns once this node applied it, so everything committed before it is
        in this node's state. A node cut off from the majority cannot: NoQuorumError."""
        self.propose(self.make(Batch, "", commands=()), context, max_wait=max_wait)
        # A linearizable read answers from a view that holds the no-op's index.
        self._wanted.index = max(int(getattr(self._wanted, "index", 0)), self.applied_through())

    # -- writes ------------------------------------------------------------------------------

    def make(self, cls: type[C], request_id: str, **fields: Any) -> C:
        if len(request_id) > MAX_REQUEST_ID:
            raise StatusError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request_id is {len(request_id)} characters long: at most {MAX_REQUEST_ID}",
            )
        if request_id and (scope := caller_scope()):
            request_id = f"{scope}:{request_id}"  # one caller cannot replay another's result
        if cls in AUDITED and "actor" not in fields:
            fields["actor"] = self.actor()
        return self.proposer.make(cls, request_id=request_id or new_request_id(), **fields)

    def actor(self) -> str:
        """Who the audit log names for this call's commands (core/audit.py): "" while the
        cluster runs release 1, whose nodes would drop the field (the gate refuses it)."""
        # an actor is new in release 3: a mixed cluster's gate would refuse the command
        version = getattr(self.node, "cluster_version", SINCE_RELEASE - 1)
        return caller_actor() if version >= SINCE_RELEASE else ""

    def propose(
        self,
        command: Command,
        context: grpc.ServicerContext | None = None,
        *,
        max_wait: float | None = None,
    ) -> Result:
        deadline = self.proposer.deadline
        if max_wait is not None:
            deadline = min(deadline, max_wait)
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
        return {self.node_id: True, **self.node.peers()}

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
