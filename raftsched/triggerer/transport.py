"""How a triggerer reaches the cluster: WorkerService's trigger calls over gRPC, through
:class:`raftsched.api.client.RaftschedClient` (failover between nodes, retries of
UNAVAILABLE, request ids filled in). A triggerer authenticates with a worker token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import common_pb2, worker_pb2
from raftsched.core.model import TaskKey


@dataclass(frozen=True)
class TriggerGrant:
    """One leased trigger."""

    key: TaskKey
    token: int
    try_number: int
    kind: str
    args_json: str
    fileloc: str


@dataclass(frozen=True)
class Firing:
    key: TaskKey
    token: int
    event_json: str = "null"
    error: str = ""


class GrpcTriggererTransport:
    """Thread-safe (the clients are). ``poll_client`` carries the long poll."""

    def __init__(
        self,
        client: RaftschedClient,
        triggerer_id: str,
        *,
        poll_client: RaftschedClient | None = None,
        lease_ttl: float = 10.0,
    ) -> None:
        self.client = client
        self.poll_client = poll_client or client
        self.triggerer_id = triggerer_id
        self.lease_ttl = lease_ttl

    def lease(self, max_triggers: int, wait_seconds: float) -> list[TriggerGrant]:
        request = worker_pb2.LeaseTriggersRequest(
            triggerer_id=self.triggerer_id,
            max_triggers=max_triggers,
            wait_seconds=wait_seconds,
            lease_ttl_seconds=self.lease_ttl,
        )
        timeout = wait_seconds + self.poll_client.deadline
        response = self.poll_client.workers.LeaseTriggers(request, timeout=timeout)
        return [
            TriggerGrant(
                TaskKey(t.key.dag_id, t.key.run_id, t.key.task_id),
                t.token,
                t.try_number,
                t.kind,
                t.args_json,
                t.fileloc,
            )
            for t in response.triggers
        ]

    def heartbeat(self, refs: list[tuple[TaskKey, int]]) -> list[bool]:
        request = worker_pb2.HeartbeatTriggersRequest(
            triggerer_id=self.triggerer_id,
            triggers=[_ref(key, token) for key, token in refs],
            lease_ttl_seconds=self.lease_ttl,
        )
        return list(self.client.workers.HeartbeatTriggers(request).ok)

    def fire(self, firings: list[Firing]) -> list[str]:
        """Per firing: "" when it counted, else why not (it was not ours any more)."""
        request = worker_pb2.FireTriggersRequest(
            triggerer_id=self.triggerer_id,
            firings=[
                worker_pb2.TriggerFiring(
                    ref=_ref(f.key, f.token), event_json=f.event_json, error=f.error
                )
                for f in firings
            ],
        )
        return list(self.client.workers.FireTriggers(request).refused)


def _ref(key: TaskKey, token: int) -> Any:
    return worker_pb2.TriggerRef(
        key=common_pb2.TaskKey(dag_id=key.dag_id, run_id=key.run_id, task_id=key.task_id),
        token=token,
    )
