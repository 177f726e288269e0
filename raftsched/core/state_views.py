"""The read views of ``SchedulerState``: what the leader, the API and the tests read.

Each view asks the owner that holds the answer (``catalog``, ``run_table``, ``task_queue``,
``outbox``, ``secrets``); none changes anything. Mixed into ``SchedulerState`` so callers
keep reading ``state.dags``, ``state.leases()``, ``state.outbox_after(...)`` and so on.
Not thread-safe, like the state: read where apply runs, or under the node's lock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime

from raftsched.core import commands as c
from raftsched.core.catalog import DagCatalog
from raftsched.core.model import (
    DagRecord,
    DagRun,
    DagSpec,
    ImportErrorRecord,
    Lease,
    OutboxEntry,
    TaskInstance,
    TaskKey,
    TaskState,
)
from raftsched.core.outbox import Outbox
from raftsched.core.run_table import RunTable
from raftsched.core.secret_table import SecretRecord, SecretTable
from raftsched.core.task_queue import TaskQueue


class StateViews:
    """Read-only views over the owners (set by ``SchedulerState.__init__``)."""

    catalog: DagCatalog
    run_table: RunTable
    task_queue: TaskQueue
    outbox: Outbox
    secrets: SecretTable

    @property
    def dags(self) -> Mapping[str, DagRecord]:
        return self.catalog.records

    def dag(self, dag_id: str) -> DagRecord | None:
        return self.catalog.get(dag_id)

    def last_logical_date(self, dag_id: str) -> datetime | None:
        record = self.catalog.get(dag_id)
        return None if record is None else record.last_logical_date

    def active_run_count(self, dag_id: str) -> int:
        """Runs of the DAG in QUEUED or RUNNING state."""
        return self.run_table.active_count(dag_id)

    def running_task_count(self, dag_id: str) -> int:
        return self.task_queue.running_count(dag_id)

    def runs(self, dag_id: str | None = None) -> Iterator[DagRun]:
        """Runs held in memory (active ones, and finished ones until evicted)."""
        for rec in self.run_table.records(dag_id):
            yield rec.run

    @property
    def run_count(self) -> int:
        return len(self.run_table)

    def run(self, dag_id: str, run_id: str) -> DagRun | None:
        rec = self.run_table.get(dag_id, run_id)
        return None if rec is None else rec.run

    def run_spec(self, dag_id: str, run_id: str) -> DagSpec | None:
        """The DAG version the run executes."""
        rec = self.run_table.get(dag_id, run_id)
        return None if rec is None else rec.spec

    def task_instances(self, dag_id: str, run_id: str) -> list[TaskInstance]:
        rec = self.run_table.get(dag_id, run_id)
        return [] if rec is None else list(rec.tis.values())

    def task_instance(self, key: TaskKey) -> TaskInstance | None:
        found = self.run_table.find(key)
        return None if found is None else found[1]

    def leases(self) -> list[Lease]:
        """Live leases (one per RUNNING task instance)."""
        return self.task_queue.leases()

    @property
    def queued_count(self) -> int:
        return self.task_queue.queued_count

    @property
    def import_errors(self) -> tuple[ImportErrorRecord, ...]:
        return self.catalog.import_errors

    def secret_records(self, kind: str) -> dict[str, SecretRecord]:
        """Variables or connections (``kind``) by name: ciphertext only (handlers_secrets)."""
        return self.secrets.of_kind(kind)

    def expired_leases(self, now: datetime, limit: int | None = None) -> list[c.LeaseRef]:
        """Leases with expires_at <= now, earliest first (for an ExpireLeases proposal)."""
        return [c.LeaseRef(lease.key, lease.token) for lease in self.task_queue.expired(now, limit)]

    def ready_to_queue(self, now: datetime, limit: int | None = None) -> list[c.QueueDecision]:
        """Retries whose next_retry_at <= now (for a QueueTasks proposal). Tasks whose trigger
        rule is met are queued by apply itself, so they never wait here."""
        out = []
        for key in self.task_queue.retries_due(now, limit):
            ti = self.task_instance(key)
            assert ti is not None
            out.append(c.QueueDecision(key, TaskState.UP_FOR_RETRY, ti.try_number))
        return out

    def outbox_after(self, seq: int, limit: int) -> list[OutboxEntry]:
        return self.outbox.after(seq, limit)

    @property
    def outbox_acked_seq(self) -> int:
        return self.outbox.acked_seq

    @property
    def outbox_last_seq(self) -> int:
        return self.outbox.last_seq

    @property
    def outbox_size(self) -> int:
        return len(self.outbox)

    @property
    def outbox_log_chars(self) -> int:
        return self.outbox.log_chars
