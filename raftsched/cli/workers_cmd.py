"""`raftsched workers list`: every live worker, and those lost in the last 10 minutes with why.

Live: host, pid, version, queues, slots used/total, the attempts it runs, its last call.
Lost: when and why (it stopped, its task supervisor saw it die, or it fell silent). Needs
role viewer. Flags and errors: ``connect.py``.
"""

from __future__ import annotations

import argparse
from typing import Any

from raftsched.cli.common import usage
from raftsched.cli.connect import add_connection_flags, cluster_call, connect
from raftsched.cli.output import emit

LIVE_COLUMNS = ("worker_id", "host", "pid", "version", "queues", "slots", "running", "last_seen")
LOST_COLUMNS = ("worker_id", "host", "pid", "lost_at", "reason")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    workers = sub.add_parser("workers", help="connected workers and those lost lately")
    workers_sub = workers.add_subparsers(dest="workers_command", metavar="SUBCOMMAND")
    workers.set_defaults(handler=lambda _args: usage(workers))
    lst = workers_sub.add_parser(
        "list",
        help="live workers (host, pid, version, queues, slots, running attempts) and lost ones",
        description="Live workers: host, pid, version, queues, slots used/total, the attempts"
        " each runs, its last call. Lost workers of the last 10 minutes: when and why (it"
        " stopped, its task supervisor saw it die, or it fell silent). Needs role viewer.",
    )
    add_connection_flags(lst)
    lst.set_defaults(handler=cmd_list)


def _seconds(value: Any) -> str | None:
    return value.isoformat(timespec="seconds") if value is not None else None


def cmd_list(args: argparse.Namespace) -> int:
    from raftsched.api.gen import worker_pb2
    from raftsched.api.workers_view import workers_dict

    with connect(args) as client, cluster_call("workers list", role="viewer"):
        found = workers_dict(client.workers.ListWorkers(worker_pb2.ListWorkersRequest()))
    if args.output == "json":
        emit(found, output="json")
        return 0
    live = [
        {
            **w,
            "slots": f"{w['slots_used']}/{w['slots_total'] or '?'}",
            "running": [f"{r['dag_id']}/{r['run_id']}/{r['task_id']}" for r in w["running"]]
            or None,  # "-"
            "last_seen": _seconds(w["last_seen"]),
        }
        for w in found["workers"]
    ]
    emit(live, output="table", columns=LIVE_COLUMNS)
    print(f"{len(live)} live worker(s)")
    if found["lost"]:
        lost = [
            {**w, "lost_at": _seconds(w["lost_at"]), "reason": w["lost_reason"]}
            for w in found["lost"]
        ]
        print()
        emit(lost, output="table", columns=LOST_COLUMNS)
        print(f"{len(lost)} lost in the last 10 minutes")
    return 0
