"""ClusterService: every node's status, leadership transfer, membership changes.

GetStatus. The answering node reports itself from ``NodeRuntime.status()``; unless
``local_only`` it asks every other member's API (``GetStatus(local_only=True)`` at the peer's
API address, see ``context.peer_api_address``) with a short timeout, forwarding the caller's
own bearer token, and reports a silent peer as NODE_ROLE_UNREACHABLE with the error. ``lag``
is the leader's commit index minus the node's applied index.

TransferLeadership. Sent to the current leader's Raft port as an admin message
(``raft/admin_messages.py``, ``transfer``; it runs on the leader's tick thread), then waits
(bounded) until another node leads. Without a target the leader picks the connected follower
with the highest match index (the most up-to-date one). The leader refuses when the target is
not a connected, fully caught-up follower; a refusal is asked again for ``TRANSFER_RETRY``
seconds, because a busy leader's followers are one heartbeat behind its last entry at most
moments.

AddNode / RemoveNode (Raft dynamic membership, ``raft/membership.py``, one change at a
time). To grow the cluster by one node:

1. On the new host, start ``raftsched scheduler --address NEW`` with ``[cluster] nodes``
   listing the current members *and* NEW (same secret). It waits: the members ignore it.
2. Call AddNode(NEW) on any node (``raftsched cluster add-node NEW``). When it answers, NEW is
   a member and catches up from the leader.
3. Add NEW to ``[cluster] nodes`` in every other node's config, for their next restart.

To shrink: RemoveNode(OLD) (transfer leadership away from OLD first), stop OLD, then drop it
from every config. A second change while one is in flight is refused (FAILED_PRECONDITION
"another membership change is in progress").
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from raftsched import retry
from raftsched.api import tls
from raftsched.api.gen import cluster_pb2, cluster_pb2_grpc
from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.audit import list_audit_records
from raftsched.api.servicers.context import ApiContext
from raftsched.api.status import invalid_argument, translate_errors
from raftsched.errors import ConfigError, MembershipUnconfirmed, RaftPortUnreachable, StatusError
from raftsched.raft import admin_messages
from raftsched.raft.membership import change_membership
from raftsched.raft.settings import split_address

log = logging.getLogger(__name__)

PEER_TIMEOUT = 1.0  # seconds for a peer's GetStatus
TRANSFER_WAIT = 5.0  # seconds for leadership to move
TRANSFER_RETRY = 2.0  # seconds a refused transfer is asked again (the target catching up)
TRANSFER_RETRY_GAP = 0.02
MOVED = "raftsched: the leader changed"  # not an answer of pysyncobj's: stop asking
Code = grpc.StatusCode


class ClusterServicer(cluster_pb2_grpc.ClusterServiceServicer):
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="peer-status")
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._membership_lock = threading.Lock()
        self._done: OrderedDict[str, Any] = OrderedDict()  # request_id -> response
        self.history: Any = None  # NodeHistory (api/node_history.py), set by NodeApi

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()

    # -- ListAuditRecords (api/servicers/audit.py) ------------------------------------------

    @translate_errors
    def ListAuditRecords(self, request: Any, context: grpc.ServicerContext) -> Any:
        return list_audit_records(self.ctx, request)

    # -- GetStatus ---------------------------------------------------------------------------

    @translate_errors
    def GetStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        local = self._local_status()
        if request.with_history and self.history is not None:
            local.history.CopyFrom(self.history.to_proto())
        nodes = [local]
        if not request.local_only:
            metadata = _auth_metadata(context)
            peers = [a for a in self.ctx.members() if a != self.ctx.node_id]
            ask = request.with_history
            nodes += list(self._pool.map(lambda a: self._peer_status(a, metadata, ask), peers))
        leaders = [
            n.commit_index for n in nodes if n.role == cluster_pb2.NODE_ROLE_LEADER and n.has_quorum
        ]
        top = max(leaders) if leaders else max(n.commit_index for n in nodes)
        for node in nodes:
            if node.role != cluster_pb2.NODE_ROLE_UNREACHABLE:
                node.lag = max(0, top - node.applied_index)
        return cluster_pb2.GetStatusResponse(nodes=nodes, freshness=self.ctx.freshness())

    def _local_status(self) -> cluster_pb2.NodeStatus:
        assert self.ctx.status is not None, "ClusterServicer needs the runtime's status()"
        return convert.node_status(self.ctx.status(), self.ctx.peer_api(self.ctx.node_id))

    def _peer_status(
        self, address: str, metadata: tuple[Any, ...], with_history: bool = False
    ) -> cluster_pb2.NodeStatus:
        api = self.ctx.peer_api(address)
        try:
            stub = cluster_pb2_grpc.ClusterServiceStub(self._channel(api))
            answer = stub.GetStatus(
                cluster_pb2.GetStatusRequest(local_only=True, with_history=with_history),
                timeout=PEER_TIMEOUT,
                metadata=metadata,
            )
            if answer.nodes:
                node = answer.nodes[0]
                node.api_address = node.api_address or api
                return node
            error = "answered without a status"
        except grpc.RpcError as err:
            error = f"{err.code().name}: {err.details()}"  # type: ignore[attr-defined]
        except Exception as err:  # a bad address, a closed channel
            error = str(err)
        return cluster_pb2.NodeStatus(
            node_id=address,
            address=address,
            api_address=api,
            role=cluster_pb2.NODE_ROLE_UNREACHABLE,
            error=error,
        )

    def _channel(self, address: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                options = [("grpc.max_reconnect_backoff_ms", 1000)]
                if self.ctx.api.tls_cert is not None:
                    creds = tls.channel_credentials(self.ctx.api.tls_ca)
                    channel = grpc.secure_channel(address, creds, options=options)
                else:
                    channel = grpc.insecure_channel(address, options=options)
                self._channels[address] = channel
            return channel

    # -- leadership --------------------------------------------------------------------------

    @translate_errors
    def TransferLeadership(self, request: Any, context: grpc.ServicerContext) -> Any:
        target = request.target
        members = self.ctx.members()
        if target:
            _check_address(target, "target")
            if target not in members:
                raise invalid_argument(
                    "target", target, f"not a member; members: {', '.join(sorted(members))}"
                )
        leader = self.ctx.node.leader_address
        if leader is None or not self.ctx.node.quorum:
            raise self.ctx.no_quorum()
        if target and target == leader:
            return cluster_pb2.TransferLeadershipResponse(
                leader_id=leader, freshness=self.ctx.freshness()
            )
        # A busy leader appends entries all the time, and pysyncobj refuses a target that lacks
        # the last one; the follower acknowledges it with the next heartbeat (40 ms), so a
        # refusal is asked again for a while before it reaches the caller.
        asked = 0

        def ask() -> str:
            nonlocal asked
            asked += 1
            now = self.ctx.node.leader_address
            if asked > 1 and (now is None or now != leader):
                # moved meanwhile (another transfer, an election): no point asking again
                return MOVED
            return self._utility(leader, ["transfer", target])

        answer = retry.poll(
            ask,
            done=lambda answer: answer.startswith("SUCCESS") or answer == MOVED,
            deadline=TRANSFER_RETRY,
            every=TRANSFER_RETRY_GAP,
        )
        if not answer.startswith("SUCCESS"):
            raise StatusError(
                Code.FAILED_PRECONDITION,
                f"leader {leader} refused to transfer leadership"
                f"{' to ' + target if target else ''}: the target must be a connected follower"
                " holding every log entry (busy clusters: retry in a moment)",
            )
        end = time.monotonic() + TRANSFER_WAIT
        while time.monotonic() < end:
            now = self.ctx.node.leader_address
            if now is not None and now != leader and (not target or now == target):
                log.info("leadership moved from %s to %s", leader, now)
                return cluster_pb2.TransferLeadershipResponse(
                    leader_id=now, freshness=self.ctx.freshness()
                )
            time.sleep(0.05)
        raise StatusError(
            Code.FAILED_PRECONDITION,
            f"leadership did not move within {TRANSFER_WAIT:g}s (leader now:"
            f" {self.ctx.node.leader_address or 'none'}); the target may have lost the"
            " election, retry",
        )

    def _utility(self, raft_address: str, message: list[str]) -> str:
        try:
            return admin_messages.send(raft_address, self.ctx.secret, message, timeout=2.0)
        except RaftPortUnreachable as err:
            raise StatusError(
                Code.UNAVAILABLE,
                f"cannot reach the leader's Raft port {raft_address}: {err.reason}",
            ) from None

    # -- membership --------------------------------------------------------------------------

    @translate_errors
    def AddNode(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._change(request, add=True)

    @translate_errors
    def RemoveNode(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._change(request, add=False)

    def _change(self, request: Any, *, add: bool) -> Any:
        address = request.address
        _check_address(address, "address")
        bounds.request_id(request.request_id)
        done = self._done.get(request.request_id) if request.request_id else None
        if done is not None:
            return done
        members = self.ctx.members()
        if add and address in members:
            raise StatusError(Code.ALREADY_EXISTS, f"{address} is already a member")
        if not add and address not in members:
            raise StatusError(
                Code.NOT_FOUND,
                f"{address} is not a member; members: {', '.join(sorted(members))}",
            )
        if not add and address == self.ctx.node.leader_address:
            raise StatusError(
                Code.FAILED_PRECONDITION,
                f"{address} leads the cluster: transfer leadership first"
                " (`raftsched cluster transfer-leader`)",
            )
        with self._membership_lock:
            self._apply_change(address, add)
        response = cluster_pb2.MembershipResponse(
            nodes=sorted(self.ctx.members()), freshness=self.ctx.freshness()
        )
        if request.request_id:
            self._done[request.request_id] = response
            while len(self._done) > 1000:
                self._done.popitem(last=False)
        log.info("membership: %s %s", "added" if add else "removed", address)
        return response

    def _apply_change(self, address: str, add: bool) -> None:
        try:
            change_membership(self.ctx.node.raft, address, add=add)
        except MembershipUnconfirmed:
            if not self.ctx.has_leader():
                raise self.ctx.no_quorum() from None
            raise


def _check_address(address: str, field: str) -> None:
    bounds.address(field, address)  # bounded, printable ASCII: before any lookup or log line
    try:
        split_address(address, key=field)
    except ConfigError:
        raise invalid_argument(field, address, "expected host:port") from None


def _auth_metadata(context: grpc.ServicerContext) -> tuple[Any, ...]:
    return tuple(
        (key, value) for key, value in context.invocation_metadata() if key == "authorization"
    )
