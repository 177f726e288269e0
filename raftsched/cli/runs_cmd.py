"""`raftsched runs list [DAG_ID]`: DAG runs, newest logical date first (role viewer).

Filters: ``--state`` (repeatable), ``--type scheduled|manual``; ``--limit`` caps how many are
fetched (pages of up to 100 are followed until then). Flags and errors: ``connect.py``.
"""

from __future__ import annotations

import argparse
from typing import Any

from raftsched.cli.common import positive_int, usage
from raftsched.cli.connect import add_connection_flags, cluster_call, connect, to_dict
from raftsched.cli.dags_cmd import text_arg
from raftsched.cli.output import emit

RUN_STATES = ("queued", "running", "success", "failed")
RUN_TYPES = ("scheduled", "manual", "asset_triggered")
COLUMNS = ("dag_id", "run_id", "state", "type", "logical_date", "start_date", "end_date")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    runs = sub.add_parser("runs", help="DAG runs")
    runs_sub = runs.add_subparsers(dest="runs_command", metavar="SUBCOMMAND")
    runs.set_defaults(handler=lambda _args: usage(runs))

    lst = runs_sub.add_parser("list", help="runs, newest logical date first")
    lst.add_argument(
        "dag_id", nargs="?", default="", type=text_arg, help="default: runs of every DAG"
    )
    lst.add_argument("--state", action="append", choices=RUN_STATES, default=[], help="repeatable")
    lst.add_argument("--type", choices=RUN_TYPES, help="one run type (default: all)")
    lst.add_argument(
        "--limit", type=positive_int, default=50, metavar="N", help="at most N runs (50)"
    )
    add_connection_flags(lst)
    lst.set_defaults(handler=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    from raftsched.api.gen import common_pb2, dag_pb2

    request = dag_pb2.ListRunsRequest(
        dag_id=args.dag_id,
        states=[common_pb2.RunState.Value(f"RUN_STATE_{s.upper()}") for s in args.state],
        run_type=common_pb2.RunType.Value(f"RUN_TYPE_{(args.type or 'unspecified').upper()}"),
        page_size=min(args.limit, 100),
    )
    not_found = "{detail}: `raftsched dags list` shows the known DAGs"
    runs: list[dict[str, Any]] = []
    more = False
    with connect(args) as client, cluster_call("runs list", not_found=not_found):
        while len(runs) < args.limit:
            response = client.dags.ListRuns(request)
            runs += [to_dict(run) for run in response.runs]
            more = bool(response.next_page_token)
            if not more:
                break
            request.page_token = response.next_page_token
    more = more or len(runs) > args.limit
    runs = runs[: args.limit]
    if args.output == "json":
        emit({"runs": runs, "truncated": more}, output="json")
        return 0
    rows = [{**run, "type": run["run_type"]} for run in runs]
    emit(rows, output="table", columns=COLUMNS)
    if more:
        print(f"(first {args.limit} runs; --limit N shows more)")
    return 0
