"""Conversions between ``raftsched.core`` / ``raftsched.store`` types and raftsched.v1 messages.

Pure functions, no I/O. Enum mapping follows common.proto: ``TASK_STATE_UP_FOR_RETRY`` <->
``TaskState.UP_FOR_RETRY`` ("up_for_retry"); value 0 (UNSPECIFIED) is "any" in filters and
never a real state. An unknown enum number is INVALID_ARGUMENT naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from raftsched.api.gen import cluster_pb2, common_pb2, dag_pb2, worker_pb2
from raftsched.api.status import invalid_argument
from raftsched.core import mapping
from raftsched.core.model import (
    DagRecord,
    DagRun,
    RunState,
    RunType,
    TaskInstance,
    TaskKey,
    TaskSpec,
    TaskState,
)
from raftsched.core.pool_table import pool_of, slots_of
from raftsched.core.results import LeaseGrant
from raftsched.core.timetable import Slot

# -- scalars --------------------------------------------------------------------------------


def ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    out = Timestamp()
    out.FromDatetime(value.astimezone(UTC))
    return out


def from_ts(message: Any, field: str) -> datetime | None:
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=UTC)


def _enum_to_pb(enum_type: Any, prefix: str, value: str) -> int:
    return int(enum_type.Value(f"{prefix}{str(value).upper()}"))


def _enum_from_pb(enum_type: Any, prefix: str, number: int, field: str) -> str | None:
    """The core value of a proto enum number; None for UNSPECIFIED."""
    if number == 0:
        return None
    try:
        name = enum_type.Name(number)
    except ValueError:
        names = enum_type.keys()
        allowed = ", ".join(n for n in names if not n.endswith("UNSPECIFIED"))
        raise invalid_argument(field, number, f"expected one of {allowed}") from None
    return name.removeprefix(prefix).lower()


def task_state_pb(state: TaskState | str) -> int:
    return _enum_to_pb(common_pb2.TaskState, "TASK_STATE_", state)


def run_state_pb(state: RunState | str) -> int:
    return _enum_to_pb(common_pb2.RunState, "RUN_STATE_", state)


def run_type_pb(run_type: RunType | str) -> int:
    return _enum_to_pb(common_pb2.RunType, "RUN_TYPE_", run_type)


def task_state(number: int, field: str) -> TaskState | None:
    value = _enum_from_pb(common_pb2.TaskState, "TASK_STATE_", number, field)
    return None if value is None else TaskState(value)


def run_state(number: int, field: str) -> RunState | None:
    value = _enum_from_pb(common_pb2.RunState, "RUN_STATE_", number, field)
    return None if value is None else RunState(value)


def run_type(number: int, field: str) -> RunType | None:
    value = _enum_from_pb(common_pb2.RunType, "RUN_TYPE_", number, field)
    return None if value is None else RunType(value)


def task_key(key: TaskKey) -> common_pb2.TaskKey:
    return common_pb2.TaskKey(dag_id=key.dag_id, run_id=key.run_id, task_id=key.task_id)


def core_key(message: Any, field: str = "key") -> TaskKey:
    key = message.key if field == "key" else getattr(message, field)
    for name in ("dag_id", "run_id", "task_id"):
        if not getattr(key, name):
            raise invalid_argument(f"{field}.{name}", "", "must not be empty")
    return TaskKey(key.dag_id, key.run_id, key.task_id)


def conf_text(conf: dict[str, Any]) -> str:
    return json.dumps(conf, sort_keys=True, separators=(",", ":"), default=str)


# -- DAGs -----------------------------------------------------------------------------------


def dag(
    record: DagRecord,
    *,
    next_run: Slot | None = None,
    recent: Iterable[DagRun] = (),
) -> dag_pb2.Dag:
    spec = record.spec
    schedule = spec.schedule
    out = dag_pb2.Dag(
        dag_id=spec.dag_id,
        fileloc=spec.fileloc,
        description=spec.description,
        tags=list(spec.tags),
        schedule=dag_pb2.Schedule(
            kind=str(schedule.kind),
            cron=schedule.cron or "",
            interval_seconds=schedule.interval_seconds or 0,
            display=schedule.display,
        ),
        timezone=spec.timezone,
        start_date=ts(spec.start_date),
        end_date=ts(spec.end_date),
        catchup=spec.catchup,
        max_active_runs=spec.max_active_runs,
        max_active_tasks=spec.max_active_tasks,
        paused=record.paused,
        active=record.active,
        spec_hash=spec.spec_hash,
        updated_at=ts(record.updated_at),
        last_logical_date=ts(record.last_logical_date),
        recent_runs=[
            dag_pb2.RunSummary(
                run_id=run.run_id,
                state=run_state_pb(run.state),
                logical_date=ts(run.logical_date),
                run_type=run_type_pb(run.run_type),
            )
            for run in recent
        ],
        task_count=len(spec.tasks),
        params_json=spec.params_json,
        overlap=spec.overlap or "allow_all",
        scheduled_runs=record.scheduled_runs,
        jitter_seconds=spec.jitter_seconds or 0.0,
        pause_on_failure=spec.pause_on_failure,
        pause_note=record.pause_note,
        asset_condition=spec.asset_condition,
        skipped=[
            dag_pb2.SkippedSlots(
                first=ts(s.first),
                last=ts(s.last),
                count=s.count,
                reason=s.reason,
                decided_at=ts(s.at),
            )
            for s in record.skipped
        ],
    )
    if spec.catchup_window_seconds is not None:
        out.catchup_window_seconds = spec.catchup_window_seconds
    if spec.max_runs is not None:
        out.max_runs = spec.max_runs
    if next_run is not None:
        out.next_run.CopyFrom(
            dag_pb2.NextRun(
                logical_date=ts(next_run.logical_date),
                data_interval_start=ts(next_run.data_interval_start),
                data_interval_end=ts(next_run.data_interval_end),
            )
        )
    return out


def task_definition(task: TaskSpec) -> dag_pb2.TaskDefinition:
    out = dag_pb2.TaskDefinition(
        task_id=task.task_id,
        kind=task.kind,
        command=task.command or "",
        env=dict(task.env),
        callable_name=task.callable_name or "",
        kwargs_json=task.kwargs_json,
        retries=max(0, task.retries),
        retry_delay_seconds=task.retry_delay_seconds,
        retry_exponential_backoff=task.retry_exponential_backoff,
        priority_weight=task.priority_weight,
        trigger_rule=str(task.trigger_rule),
        upstream=sorted(task.upstream),
        queue=task.queue,
        outlets=task.outlets,
        inlets=task.inlets,
        pool=pool_of(task),
        pool_slots=slots_of(task),
    )
    if task.max_retry_delay_seconds is not None:
        out.max_retry_delay_seconds = task.max_retry_delay_seconds
    if task.execution_timeout_seconds is not None:
        out.execution_timeout_seconds = task.execution_timeout_seconds
    return out


# -- runs and task instances ----------------------------------------------------------------


def dag_run(run: DagRun) -> dag_pb2.DagRun:
    return dag_pb2.DagRun(
        dag_id=run.dag_id,
        run_id=run.run_id,
        logical_date=ts(run.logical_date),
        data_interval_start=ts(run.data_interval_start),
        data_interval_end=ts(run.data_interval_end),
        run_type=run_type_pb(run.run_type),
        state=run_state_pb(run.state),
        conf_json=conf_text(run.conf),
        created_at=ts(run.created_at),
        start_date=ts(run.start_date),
        end_date=ts(run.end_date),
        asset_events_json=run.asset_events_json,
    )


def task_instance(ti: TaskInstance) -> dag_pb2.TaskInstance:
    """A live task instance (its current attempt)."""
    out = dag_pb2.TaskInstance(
        key=task_key(ti.key),
        state=task_state_pb(ti.state),
        try_number=ti.try_number,
        max_tries=ti.max_tries,
        worker_id=ti.worker_id or "",
        lease_token=ti.lease_token or 0,
        queued_at=ts(ti.queued_at),
        start_date=ts(ti.start_date),
        end_date=ts(ti.end_date),
        next_retry_at=ts(ti.next_retry_at),
        message=ti.message,
        lease_expires_at=ts(ti.lease.expires_at if ti.lease is not None else None),
        result_json=ti.result_json or "",
        map_count=ti.map_count or 0,
    )
    if ti.exit_code is not None:
        out.exit_code = ti.exit_code
    _map_index(out, ti.key.task_id)
    return out


def _map_index(out: dag_pb2.TaskInstance, task_id: str) -> None:
    index = mapping.split_id(task_id)[1]
    if index >= 0:
        out.map_index = index


def attempt(row: Any, max_tries: int = 0) -> dag_pb2.TaskInstance:
    """A history row (``store.queries.TaskAttempt``): one past attempt."""
    out = dag_pb2.TaskInstance(
        key=common_pb2.TaskKey(dag_id=row.dag_id, run_id=row.run_id, task_id=row.task_id),
        state=task_state_pb(row.state),
        try_number=row.try_number,
        max_tries=max_tries,
        worker_id=row.worker_id or "",
        lease_token=row.lease_token or 0,
        queued_at=ts(row.queued_at),
        start_date=ts(row.start_date),
        end_date=ts(row.end_date),
        message=row.message or "",
        result_json=getattr(row, "result_json", None) or "",
    )
    if row.exit_code is not None:
        out.exit_code = row.exit_code
    _map_index(out, row.task_id)
    return out


def log_chunk(chunk: Any, try_number: int) -> common_pb2.LogChunk:
    return common_pb2.LogChunk(
        seq=chunk.chunk_seq,
        try_number=try_number,
        stream=chunk.stream,
        text=chunk.text,
        created_at=ts(chunk.created_at),
    )


# -- leases ---------------------------------------------------------------------------------


def task_lease(
    grant: LeaseGrant, upstream_results: dict[str, str] | None = None
) -> worker_pb2.TaskLease:
    """A granted attempt, with the return values (XCom) of its upstream tasks; an instance of
    a mapped task gets its own item in its arguments (core/mapping.py)."""
    lease = grant.lease
    index = mapping.split_id(lease.key.task_id)[1]
    task = mapping.instance_task(grant.task, index, upstream_results or {})
    out = worker_pb2.TaskLease(
        key=task_key(lease.key),
        token=lease.token,
        try_number=lease.try_number,
        max_tries=grant.max_tries,
        expires_at=ts(lease.expires_at),
        kind=task.kind,
        command=task.command or "",
        env=dict(task.env),
        callable_name=task.callable_name or "",
        kwargs_json=task.kwargs_json,
        fileloc=grant.fileloc,
        logical_date=ts(grant.logical_date),
        data_interval_start=ts(grant.data_interval_start),
        data_interval_end=ts(grant.data_interval_end),
        conf_json=conf_text(grant.conf),
        params_json=grant.params_json,
        resume_json=grant.resume_json,
    )
    if task.execution_timeout_seconds is not None:
        out.execution_timeout_seconds = task.execution_timeout_seconds
    if task.skip_on_exit_code is not None:
        out.skip_on_exit_code = task.skip_on_exit_code
    out.upstream_results.update(upstream_results or {})
    return out


# -- cluster status -------------------------------------------------------------------------

_ROLES = {
    "leader": cluster_pb2.NODE_ROLE_LEADER,
    "follower": cluster_pb2.NODE_ROLE_FOLLOWER,
    "candidate": cluster_pb2.NODE_ROLE_CANDIDATE,
}


def status_error(status: dict[str, Any]) -> str:
    """Every error a node reports (fatal, state machine halted, and as leader its materializer
    failing), joined by "; " in that order; empty when healthy."""
    keys = ["fatal_error", "apply_error"]
    if status.get("role") == "leader":
        keys.append("materializer_error")
    return "; ".join(str(status[k]) for k in keys if status.get(k))


def node_status(status: dict[str, Any], api_address: str) -> cluster_pb2.NodeStatus:
    """``NodeRuntime.status()`` as a NodeStatus (lag is filled in by the caller)."""
    out = cluster_pb2.NodeStatus(
        node_id=str(status.get("node_id") or ""),
        address=str(status.get("address") or ""),
        api_address=api_address,
        role=_ROLES.get(str(status.get("role")), cluster_pb2.NODE_ROLE_UNSPECIFIED),
        term=int(status.get("term") or 0),
        commit_index=int(status.get("commit_index") or 0),
        applied_index=int(status.get("applied_index") or 0),
        digest=str(status.get("digest") or ""),
        digest_index=int(status.get("digest_index") or 0),
        outbox_backlog=int(status.get("outbox_size") or 0),
        outbox_last_seq=int(status.get("outbox_last_seq") or 0),
        outbox_acked_seq=int(status.get("outbox_acked_seq") or 0),
        backpressure=bool(status.get("backpressure")),
        has_quorum=bool(status.get("has_quorum")),
        error=status_error(status),
        version=str(status.get("version") or ""),
        release=int(status.get("release") or 0),
        cluster_version=int(status.get("cluster_version") or 0),
    )
    leading = status.get("role") == "leader"  # the materializer's view is the leader's only
    if leading and status.get("db_watermark") is not None:
        out.db_watermark = int(status["db_watermark"])
    if leading and status.get("db_ok") is not None:
        out.db_ok = bool(status["db_ok"])
    if leading and status.get("quarantined") is not None:
        out.quarantined = int(status["quarantined"])
    contact = status.get("last_leader_contact")
    if contact:
        out.last_leader_contact.CopyFrom(ts(datetime.fromtimestamp(float(contact), UTC)))
    return out
