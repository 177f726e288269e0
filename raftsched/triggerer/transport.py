"""How a triggerer reaches the cluster: WorkerService's trigger calls over gRPC, through
:class:`raftsched.api.client.RaftschedClient` (failover between nodes, retries of
UNAVAILABLE, request ids filled in). A triggerer authenticates with a worker token."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf import timestamp_pb2

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import common_pb2, worker_pb2
from raftsched.core.model import TaskKey
from raftsched.errors import RaftschedError


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

    def resolve_connection(self, key: TaskKey, token: int, conn_id: str) -> str:
        """The URI of a connection the deferred task ``key`` declares, for the holder of its
        trigger's lease ``token`` (the node checks both)."""
        from raftsched.api.gen import secret_pb2

        request = secret_pb2.ResolveSecretsRequest(
            key=_ref(key, token).key,
            token=token,
            worker_id=self.triggerer_id,
            connections=[conn_id],
        )
        response = self.client.secrets.ResolveSecrets(request)
        for value in response.values:
            if value.key == conn_id:
                return str(value.value)
        raise RaftschedError(f"the cluster did not answer connection {conn_id}")

    def external_state(
        self,
        key: TaskKey,
        token: int,
        dag_id: str,
        logical_date: datetime,
        task_ids: list[str],
    ) -> tuple[bool, str, list[str]]:
        """(found, the run's state, the tasks' states) of ``dag_id``'s run at
        ``logical_date``, asked under the trigger lease ``(key, token)``."""
        stamp = timestamp_pb2.Timestamp()
        stamp.FromDatetime(logical_date.astimezone(UTC))
        request = worker_pb2.ExternalRunStateRequest(
            triggerer_id=self.triggerer_id,
            ref=_ref(key, token),
            dag_id=dag_id,
            logical_date=stamp,
            task_ids=task_ids,
        )
        answer = self.client.workers.ExternalRunState(request)
        return bool(answer.found), str(answer.run_state), list(answer.task_states)


def _ref(key: TaskKey, token: int) -> Any:
    return worker_pb2.TriggerRef(
        key=common_pb2.TaskKey(dag_id=key.dag_id, run_id=key.run_id, task_id=key.task_id),
        token=token,
    )
