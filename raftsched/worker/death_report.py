"""The worker's side of its death report (docs/architecture.md §11).

``loop.Worker`` arms its task supervisor with how to reach the cluster; then it tells it each
lease it holds as soon as the call that granted it returns (before anything of it starts) and
drops it once it is over, and names each call that may grant leases before sending it (its
Lease long poll, and a CompleteBatch that asks for more tasks: one "slot" each). Should the
worker die (kill -9 included), the supervisor reports the held leases as failed once every
process of them is gone, and replays the calls in flight to hand back what they granted
(``_last_words``).
"""

from __future__ import annotations

from typing import Any

from raftsched.core.model import TaskKey
from raftsched.worker.executor import executor
from raftsched.worker.runner import GUARDED, held_lease
from raftsched.worker.transport import Assignment

LEASE = "lease"  # the slot of the Lease long poll
OUTCOMES = "outcomes"  # the slot of a CompleteBatch asking for more tasks (worker.reports)


def lease_ref(key: TaskKey, token: int) -> str:
    """How the worker and its supervisor name a held lease."""
    return f"{key.dag_id}/{key.run_id}/{key.task_id}#{token}"


class DeathReport:
    """Mixed into ``loop.Worker`` (which provides the attributes below)."""

    transport: Any
    worker_id: str
    settings: Any
    _armed: bool

    def _arm(self) -> None:
        """Arm the death report: should this process die, its task supervisor reports the
        attempts it held as failed once they are all dead."""
        last_words = getattr(self.transport, "last_words", None)
        config = (
            last_words() if callable(last_words) and GUARDED and not self.settings.noop else None
        )
        if config is not None:
            executor().arm(
                {**config, "worker_id": self.worker_id, "lease_ttl": self.settings.lease_ttl}
            )
            self._armed = True
            if hasattr(self.transport, "on_poll"):
                self.transport.on_poll = self._polling

    def _polling(self, request_id: str, max_tasks: int, slot: str = LEASE) -> None:
        """A call of ``slot`` that may grant leases is about to go (""): none in flight."""
        if self._armed:
            executor().polling(request_id, max_tasks, slot=slot)

    def _hold(self, leases: list[Assignment]) -> None:
        """Tell the supervisor, before anything of them starts, which leases we hold."""
        if self._armed:
            ex = executor()
            for a in leases:
                ex.hold(lease_ref(a.key, a.token), held_lease(a))

    def _drop(self, leases: list[tuple[TaskKey, int]]) -> None:
        if self._armed:
            for key, token in leases:
                executor().drop(lease_ref(key, token))
