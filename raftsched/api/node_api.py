"""The gRPC API of one scheduler node: servicers wired to the node, the server, its health.

``NodeApi(runtime, api_config, ...)`` builds the four raftsched.v1 servicers around the
runtime's Raft node, proposer and DB engine; ``start()`` binds (``[api] grpc_bind``, or the
node's Raft host with Raft port + 200) and serves; ``stop()`` refuses new calls, lets running
ones finish for a short grace, and removes the apply listener.

Health (``grpc.health.v1``): SERVING only while the node is part of a cluster with a leader
(a known leader and a quorum), polled every :data:`HEALTH_INTERVAL` seconds; NOT_SERVING
otherwise, so a load balancer routes around a node cut off from the majority.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from raftsched.addresses import api_bind_for
from raftsched.api.node_history import NodeHistory
from raftsched.api.server import ApiServer, build_server
from raftsched.api.servicers import (
    ApiContext,
    ClusterServicer,
    DagServicer,
    QueueSignal,
    UserServicer,
    WorkerServicer,
)
from raftsched.api.servicers.assets import AssetServicer
from raftsched.api.servicers.pools import PoolServicer
from raftsched.api.servicers.secrets import SecretServicer

if TYPE_CHECKING:
    from raftsched.cluster.runtime import NodeRuntime
    from raftsched.config import ApiConfig

log = logging.getLogger(__name__)

HEALTH_INTERVAL = 0.5
HISTORY_EVERY = 2  # health ticks per history tick: leader changes seen within a second
STOP_GRACE = 1.0


class NodeApi:
    def __init__(
        self,
        runtime: NodeRuntime,
        api: ApiConfig,
        *,
        engine: Any = None,
        default_lease_ttl: float = 30.0,
        max_workers: int | None = None,
    ) -> None:
        node, proposer = runtime.node, runtime.proposer
        assert node is not None and proposer is not None, "NodeApi after the node started"
        self.ctx = ApiContext(
            node=node,
            proposer=proposer,
            api=api,
            engine=engine,
            secret=runtime.settings.secret,
            default_lease_ttl=default_lease_ttl,
            status=runtime.status,
            grpc_bind=api.grpc_bind,
            workers_seen=getattr(runtime, "workers_seen", None),
        )
        self.bind = api_bind_for(runtime.settings.self_address, api.grpc_bind)
        self.signal = QueueSignal(node)
        self.cluster = ClusterServicer(self.ctx)
        commit_latency = getattr(getattr(node, "instruments", None), "commit_latency", None)
        self.history = NodeHistory(runtime.status, lambda: self.ctx.members(), commit_latency)
        self.cluster.history = self.history
        servicers = [
            self.cluster,
            DagServicer(self.ctx),
            WorkerServicer(self.ctx, self.signal),
            UserServicer(self.ctx),
            SecretServicer(self.ctx, getattr(runtime, "fernet_keys", ())),
            PoolServicer(self.ctx),
            AssetServicer(self.ctx),
        ]
        self.server: ApiServer = build_server(  # pools: [api] grpc_max_workers, _long_polls
            api, servicers, bind=self.bind, max_workers=max_workers, gate=self.ctx
        )
        self._stop = threading.Event()
        self._health: threading.Thread | None = None
        self._serving: bool | None = None

    @property
    def address(self) -> str:
        return self.server.address

    def start(self) -> None:
        self.ctx.node.add_apply_listener(self.signal.on_apply)
        self.server.start()
        self._update_health()
        self._health = threading.Thread(target=self._health_loop, name="api-health", daemon=True)
        self._health.start()

    def stop(self) -> None:
        self._stop.set()
        self.ctx.node.remove_apply_listener(self.signal.on_apply)
        self.signal.close()  # long polls answer now: their workers move to another node
        self.server.stop(grace=STOP_GRACE)
        self.cluster.close()
        if self._health is not None:
            self._health.join(2.0)

    def _health_loop(self) -> None:
        ticks = 0
        while not self._stop.wait(HEALTH_INTERVAL):
            try:
                self._update_health()
                if ticks % HISTORY_EVERY == 0:
                    self.history.tick()  # the cluster page's history (api/node_history.py)
            except Exception:
                log.exception("health update failed")
            ticks += 1

    def _update_health(self) -> None:
        serving = self.ctx.has_leader()
        if serving != self._serving:
            self._serving = serving
            self.server.set_serving(serving)
            log.info("API health: %s", "SERVING" if serving else "NOT_SERVING (no leader)")
