"""The webserver's view models: proto messages of the cluster's answers as plain values.

:func:`dag_dict`, :func:`run_dict`, :func:`ti_dict`, :func:`task_dict` and :func:`node_dict`
turn a message into a dict of plain values (str, int, aware UTC datetimes, lists), which the
templates and the REST schemas read; the enums become their lower-case names. The
:class:`~raftsched.web.gateway.Gateway` returns them.
"""

from __future__ import annotations

import json
from typing import Any

from raftsched.web.gateway_assets import condition_text, condition_uris

from raftsched.api.gen import cluster_pb2, common_pb2, dag_pb2
from raftsched.api.wire import enum_text, when

ts = when  # an aware UTC datetime from a Timestamp field (raftsched.api.wire)


def run_state(value: int) -> str:
    return enum_text(common_pb2.RunState, value)


def task_state(value: int) -> str:
    return enum_text(common_pb2.TaskState, value)


def run_type(value: int) -> str:
    return enum_text(common_pb2.RunType, value)


MANUAL_ONLY = "manual only"


def is_manual_only(schedule: dag_pb2.Schedule) -> bool:
    """True for ``schedule=None`` (kind "none"): the DAG only runs when triggered."""
    return schedule.kind in ("", "none") and not (schedule.cron or schedule.interval_seconds)


def schedule_text(schedule: dag_pb2.Schedule) -> str:
    """What the author wrote ("@daily", "0 6 * * *"), or "manual only" for no schedule."""
    if is_manual_only(schedule):
        return MANUAL_ONLY
    return schedule.display or schedule.cron or schedule.kind


def dag_dict(dag: dag_pb2.Dag) -> dict[str, Any]:
    next_run = None
    if dag.HasField("next_run"):
        next_run = {
            "logical_date": ts(dag.next_run, "logical_date"),
            "data_interval_end": ts(dag.next_run, "data_interval_end"),
        }
    return {
        "dag_id": dag.dag_id,
        "fileloc": dag.fileloc,
        "description": dag.description,
        "tags": list(dag.tags),
        "schedule": schedule_text(dag.schedule),
        "schedule_kind": dag.schedule.kind,
        "cron": dag.schedule.cron,  # expanded ("@daily" -> "0 0 * * *"); "" unless kind cron
        "interval_seconds": dag.schedule.interval_seconds,
        "manual_only": is_manual_only(dag.schedule),
        "timezone": dag.timezone,
        "start_date": ts(dag, "start_date"),
        "end_date": ts(dag, "end_date"),
        "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs,
        "max_active_tasks": dag.max_active_tasks,
        "paused": dag.paused,
        "active": dag.active,
        "updated_at": ts(dag, "updated_at"),
        "last_logical_date": ts(dag, "last_logical_date"),
        "params_json": dag.params_json,
        "params": json.loads(dag.params_json) if dag.params_json else {},  # trigger form
        "next_run": next_run,
        "recent_runs": [
            {
                "run_id": r.run_id,
                "state": run_state(r.state),
                "logical_date": ts(r, "logical_date"),
                "run_type": run_type(r.run_type),
            }
            for r in dag.recent_runs
        ],
        "task_count": dag.task_count,
        "overlap": dag.overlap,
        "catchup_window_seconds": (
            dag.catchup_window_seconds if dag.HasField("catchup_window_seconds") else None
        ),
        "max_runs": dag.max_runs if dag.HasField("max_runs") else None,
        "scheduled_runs": dag.scheduled_runs,
        "jitter_seconds": dag.jitter_seconds,
        "pause_on_failure": dag.pause_on_failure,
        "pause_note": dag.pause_note,
        "asset_condition": condition_text(dag.asset_condition),  # §21
        "asset_uris": condition_uris(dag.asset_condition),
        "skipped": [
            {
                "first": ts(s, "first"),
                "last": ts(s, "last"),
                "count": s.count,
                "reason": s.reason,
                "decided_at": ts(s, "decided_at"),
            }
            for s in dag.skipped
        ],
    }


def task_dict(task: dag_pb2.TaskDefinition) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "kind": task.kind,
        "command": task.command,
        "env": sorted(task.env.items()),
        "kwargs_json": task.kwargs_json,
        "callable_name": task.callable_name,
        "retries": task.retries,
        "trigger_rule": task.trigger_rule,
        "upstream": list(task.upstream),
        "outlets": list(task.outlets),
        "inlets": list(task.inlets),
        "pool": task.pool or "default_pool",
        "pool_slots": task.pool_slots or 1,
        "execution_timeout": (
            task.execution_timeout_seconds if task.HasField("execution_timeout_seconds") else None
        ),
    }


def run_dict(run: dag_pb2.DagRun) -> dict[str, Any]:
    return {
        "dag_id": run.dag_id,
        "run_id": run.run_id,
        "logical_date": ts(run, "logical_date"),
        "data_interval_start": ts(run, "data_interval_start"),
        "data_interval_end": ts(run, "data_interval_end"),
        "run_type": run_type(run.run_type),
        "state": run_state(run.state),
        "conf_json": run.conf_json,
        "asset_events_json": run.asset_events_json,
        "created_at": ts(run, "created_at"),
        "start_date": ts(run, "start_date"),
        "end_date": ts(run, "end_date"),
    }


def ti_dict(ti: dag_pb2.TaskInstance) -> dict[str, Any]:
    return {
        "task_id": ti.key.task_id,
        "state": task_state(ti.state),
        "try_number": ti.try_number,
        "max_tries": ti.max_tries,
        "worker_id": ti.worker_id,
        "lease_token": ti.lease_token,
        "queued_at": ts(ti, "queued_at"),
        "start_date": ts(ti, "start_date"),
        "end_date": ts(ti, "end_date"),
        "next_retry_at": ts(ti, "next_retry_at"),
        "exit_code": ti.exit_code if ti.HasField("exit_code") else None,
        "message": ti.message,
        "lease_expires_at": ts(ti, "lease_expires_at"),
        "result_json": ti.result_json,  # its return value (XCom), JSON text; "": none
        "queue": ti.queue or "default",
        "waiting": ti.waiting,  # why a QUEUED task waits ("no live worker serves queue ..."); ""
        # an instance of a mapped task: its index (None: not one); a mapped task: its count
        "map_index": ti.map_index if ti.HasField("map_index") else None,
        "map_count": ti.map_count,
    }


def node_dict(node: cluster_pb2.NodeStatus) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "address": node.address,
        "api_address": node.api_address,
        "role": enum_text(cluster_pb2.NodeRole, node.role),
        "term": node.term,
        "commit_index": node.commit_index,
        "applied_index": node.applied_index,
        "lag": node.lag,
        "digest": node.digest,
        "digest_index": node.digest_index,
        "outbox_backlog": node.outbox_backlog,
        "db_watermark": node.db_watermark if node.HasField("db_watermark") else None,
        "db_ok": node.db_ok if node.HasField("db_ok") else None,
        "quarantined": node.quarantined if node.HasField("quarantined") else None,
        "backpressure": node.backpressure,
        "has_quorum": node.has_quorum,
        "last_leader_contact": ts(node, "last_leader_contact"),
        "error": node.error,
    }
