"""`raftsched dags show DAG` and `raftsched dags explain DAG [--at TIME]`: one DAG as the
cluster knows it, and what the cluster decided for one of its slots, and why."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from raftsched.cli.connect import add_connection_flags, cluster_call, connect, to_dict
from raftsched.cli.output import emit

DAG_NOT_FOUND = "dag {dag_id!r} not found: `raftsched dags list` shows the known DAGs"


def register(
    dags_sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    *,
    text_arg: Callable[[str], str],
    iso_time: Callable[[str], Any],
) -> None:
    show = dags_sub.add_parser("show", help="one DAG: schedule, policies, state and tasks")
    show.add_argument("dag_id", type=text_arg)
    add_connection_flags(show)
    show.set_defaults(handler=cmd_show)
    explain = dags_sub.add_parser(
        "explain", help="what the cluster decided for a DAG's slot, and why"
    )
    explain.add_argument("dag_id", type=text_arg)
    explain.add_argument(
        "--at",
        type=iso_time,
        metavar="ISO_TIME",
        help="the slot at or before this time (default: now); without an offset it is UTC",
    )
    add_connection_flags(explain)
    explain.set_defaults(handler=cmd_explain)


def cmd_show(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2

    not_found = DAG_NOT_FOUND.format(dag_id=args.dag_id)
    with connect(args) as client, cluster_call("dags show", not_found=not_found):
        response = client.dags.GetDag(dag_pb2.GetDagRequest(dag_id=args.dag_id))
    dag, tasks = to_dict(response.dag), [to_dict(task) for task in response.tasks]
    if args.output == "json":
        emit({"dag": dag, "tasks": tasks}, output="json")
        return 0
    facts = {
        "dag_id": dag["dag_id"],
        "description": dag["description"] or None,
        "file": dag["fileloc"],
        "schedule": (dag["schedule"] or {}).get("display") or None,
        "timezone": dag["timezone"],
        "paused": dag["paused"],
        "pause_note": dag["pause_note"] or None,
        "active": dag["active"],
        "catchup": dag["catchup"],
        "tags": dag["tags"] or None,
        "next_run": (dag["next_run"] or {}).get("logical_date"),
        "last_logical_date": dag["last_logical_date"],
        "max_active_runs": dag["max_active_runs"],
        "overlap": dag["overlap"],
        "catchup_window": _seconds(dag["catchup_window_seconds"]),
        "max_runs": _runs_of(dag),
        "jitter": _seconds(dag["jitter_seconds"] or None),
        "pause_on_failure": dag["pause_on_failure"] or None,
        "spec_hash": dag["spec_hash"][:12] or None,
    }
    emit(
        [{"key": k, "value": v} for k, v in facts.items()], output="table", columns=("key", "value")
    )
    print()
    rows = [
        {
            "task_id": task["task_id"],
            "kind": task["kind"],
            "retries": task["retries"],
            "trigger_rule": task["trigger_rule"] or None,
            "upstream": task["upstream"] or None,
            "pool": task.get("pool") or "default_pool",
            "pool_slots": task.get("pool_slots") or 1,
        }
        for task in tasks
    ]
    columns = ("task_id", "kind", "retries", "trigger_rule", "upstream", "pool", "pool_slots")
    emit(rows, output="table", columns=columns)
    if dag["skipped"]:
        print()
        skipped = [
            {
                "first_slot": s["first"],
                "last_slot": s["last"],
                "slots": s["count"] or "many",
                "reason": s["reason"],
                "decided_at": s["decided_at"],
            }
            for s in dag["skipped"]
        ]
        columns = ("first_slot", "last_slot", "slots", "reason", "decided_at")
        emit(skipped, output="table", columns=columns)
    if dag["recent_runs"]:
        print()
        runs = [
            {"run_id": run["run_id"], "state": run["state"], "logical_date": run["logical_date"]}
            for run in dag["recent_runs"]
        ]
        emit(runs, output="table", columns=("run_id", "state", "logical_date"))
    return 0


def _runs_of(dag: dict[str, Any]) -> str | None:
    if dag["max_runs"] is None:
        return None
    return f"{dag['scheduled_runs']} made of {dag['max_runs']}"


def _seconds(value: float | None) -> str | None:
    return None if value is None else str(timedelta(seconds=value))


def cmd_explain(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2

    request = dag_pb2.ExplainSlotRequest(dag_id=args.dag_id)
    if args.at is not None:
        request.at.FromDatetime(args.at)
    with connect(args) as client, cluster_call("dags explain"):
        answer = to_dict(client.dags.ExplainSlot(request))
    if args.output == "json":
        emit(answer, output="json")
        return 0
    print(f"{answer['verdict']}: {answer['detail']}")
    if answer["history_from"]:
        print(f"(runs in the DB reach back to {answer['history_from']})")
    return 0
