"""Raft-only state that also reaches the metadata DB: variables, connections, callback jobs.

They used to live in the replicated state alone, so ``cluster rebuild --from-db`` (which has
only the DB) lost them. Each change now leaves apply as an outbox entry like every other
committed change (docs/architecture.md §5: written exactly once, behind the watermark):
``SECRET`` with the record's Fernet token exactly as the log holds it (the DB never sees a
value), ``CALLBACK_JOB`` with the job as it is after the change.

Only once the cluster version is :data:`SINCE_RELEASE` (the release that introduced these
entries) or newer: a node of an older release applies ``SetSecret`` without an entry, and
the outbox is digested state, so a mixed cluster must not emit one. The ``SetClusterVersion``
that raises the cluster to it (from 2, or from 1 on a fresh cluster) emits every record and
job held then (:func:`emit_all`), so the DB misses nothing that came before.

Pure, like the rest of the core.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from raftsched.core.callback_table import CallbackJob
from raftsched.core.changes import emit_entry
from raftsched.core.model import OutboxKind
from raftsched.core.rows import CallbackJobRow, SecretRow
from raftsched.core.secret_table import SecretKey, SecretRecord

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

# The release (0.3.0) that introduced the SECRET and CALLBACK_JOB entries: a fixed fact, not
# core.versions.RELEASE (which moves on with later releases).
SINCE_RELEASE = 3


def persists(state: SchedulerState | Any) -> bool:
    """Whether changes of secrets and callback jobs are emitted (see module doc)."""
    return persists_at(int(state.cluster_version))


def persists_at(cluster_version: int) -> bool:
    return cluster_version >= SINCE_RELEASE


def emit_secret(
    state: SchedulerState, ref: SecretKey, record: SecretRecord | None, now: datetime
) -> None:
    """The record of ``ref`` as it is now (None: deleted)."""
    if not persists(state):
        return
    row = SecretRow(
        kind=ref[0],
        key=ref[1],
        ciphertext=None if record is None else record.ciphertext,
        description="" if record is None else record.description,
        updated_at=now if record is None else record.updated_at,
        dags="" if record is None else ",".join(record.dags),
    )
    emit_entry(state, OutboxKind.SECRET, row.to_wire())


def emit_job(state: SchedulerState, job: CallbackJob | None) -> None:
    """The job as it is now (after it was made, leased or finished)."""
    if job is None or not persists(state):
        return
    row = CallbackJobRow(
        job_id=job.job_id,
        seq=job.seq,
        dag_id=job.dag_id,
        run_id=job.run_id,
        state=job.state,
        created_at=job.created_at,
        finished_at=job.finished_at,
        job=job.to_list(),
    )
    emit_entry(state, OutboxKind.CALLBACK_JOB, row.to_wire())


def emit_all(state: SchedulerState) -> None:
    """Every record and job held (the cluster version just reached SINCE_RELEASE)."""
    for ref, record in list(state.secrets.items()):
        emit_secret(state, ref, record, record.updated_at)
    for job in list(state.callbacks.jobs()):
        emit_job(state, job)
