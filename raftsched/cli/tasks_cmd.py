"""`raftsched tasks ...`: the task instances of one run, their logs, clearing and marking.

``list DAG_ID RUN_ID`` (role viewer): every task of the run with state, attempts and worker.
``logs DAG_ID RUN_ID TASK_ID [--try N] [--follow]`` (viewer): the attempt's output written to
stdout chunk by chunk as it arrives (``--output json``: one JSON object per chunk and line);
``--follow`` keeps streaming until the attempt ends (Ctrl-C stops it, exit 130).
``clear DAG_ID RUN_ID [TASK_ID...] [--downstream]`` (operator): rerun tasks (all without ids).
``mark DAG_ID RUN_ID TASK_ID... --state success|failed`` (operator): force their state.
``test DAG_ID TASK_ID [DATE]``: run one task here with no cluster (``dags_test_cmd``).
Flags and errors: ``connect.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from raftsched.cli import dags_test_cmd, tasks_render_cmd
from raftsched.cli.common import positive_int, usage
from raftsched.cli.connect import add_connection_flags, cluster_call, connect, iso, to_dict
from raftsched.cli.dags_cmd import text_arg
from raftsched.cli.output import emit

COLUMNS = ("task_id", "state", "try", "worker", "start_date", "end_date", "exit_code")
RUN_NOT_FOUND = (
    "{detail}: `raftsched runs list DAG_ID` shows a DAG's runs,"
    " `raftsched tasks list DAG_ID RUN_ID` a run's tasks"
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tasks = sub.add_parser("tasks", help="task instances of a run: list, logs, clear, mark")
    tasks_sub = tasks.add_subparsers(dest="tasks_command", metavar="SUBCOMMAND")
    tasks.set_defaults(handler=lambda _args: usage(tasks))

    lst = tasks_sub.add_parser("list", help="every task of one run, with state and attempts")
    lst.add_argument("dag_id", type=text_arg)
    lst.add_argument("run_id", type=text_arg)
    add_connection_flags(lst)
    lst.set_defaults(handler=cmd_list)

    logs = tasks_sub.add_parser(
        "logs",
        help="a task attempt's output, streamed to stdout",
        description="Write a task attempt's output to stdout as it arrives. --follow keeps"
        " streaming until the attempt ends; --output json writes one JSON object per chunk.",
    )
    logs.add_argument("dag_id", type=text_arg)
    logs.add_argument("run_id", type=text_arg)
    logs.add_argument("task_id", type=text_arg)
    logs.add_argument(
        "--try", dest="try_number", type=try_number, metavar="N", help="default: the latest"
    )
    logs.add_argument("--follow", "-f", action="store_true", help="until the attempt ends")
    add_connection_flags(logs, timeout_help="give up after this long (default: 10, none with -f)")
    logs.set_defaults(handler=cmd_logs)

    clear = tasks_sub.add_parser("clear", help="rerun tasks of a run (needs role operator)")
    clear.add_argument("dag_id", type=text_arg)
    clear.add_argument("run_id", type=text_arg)
    clear.add_argument(
        "task_ids", nargs="*", type=text_arg, metavar="TASK_ID", help="default: every task"
    )
    clear.add_argument(
        "--downstream", action="store_true", help="also everything downstream of them"
    )
    add_connection_flags(clear)
    clear.set_defaults(handler=cmd_clear)

    mark = tasks_sub.add_parser(
        "mark", help="force tasks to success or failed (needs role operator)"
    )
    mark.add_argument("dag_id", type=text_arg)
    mark.add_argument("run_id", type=text_arg)
    mark.add_argument("task_ids", nargs="+", type=text_arg, metavar="TASK_ID")
    mark.add_argument("--state", required=True, choices=("success", "failed"))
    add_connection_flags(mark)
    mark.set_defaults(handler=cmd_mark)
    tasks_render_cmd.register(tasks_sub)
    dags_test_cmd.register_tasks(tasks_sub)  # ``tasks test``: local, no cluster


def cmd_list(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2

    request = dag_pb2.ListTaskInstancesRequest(dag_id=args.dag_id, run_id=args.run_id)
    with connect(args) as client, cluster_call("tasks list", not_found=RUN_NOT_FOUND):
        response = client.dags.ListTaskInstances(request)
    run = to_dict(response.run)
    instances = [to_dict(ti) for ti in response.task_instances]
    if args.output == "json":
        emit({"run": run, "task_instances": instances}, output="json")
        return 0
    print(f"{run['dag_id']} {run['run_id']}: {run['state']}")
    # A QUEUE column only when a task of the run has a queue of its own
    routed = any(ti.get("queue") not in ("", "default") for ti in instances)
    columns = (*COLUMNS[:4], "queue", *COLUMNS[4:]) if routed else COLUMNS
    if any(ti.get("map_index") is not None or ti.get("map_count") for ti in instances):
        columns = (columns[0], "map_index", *columns[1:])
    emit([_row(ti) for ti in instances], output="table", columns=columns)
    for ti in instances:
        if ti.get("waiting"):  # e.g. no live worker serves its queue
            print(f"note: {ti['key']['task_id']} is waiting: {ti['waiting']}")
    return 0


def _row(ti: dict[str, Any]) -> dict[str, Any]:
    """A table row; a mapped task's instance shows its task's id and its map index, the
    mapped task itself its instance count ("x1000")."""
    index, count = ti.get("map_index"), ti.get("map_count")
    return {
        **ti,
        "task_id": ti["key"]["task_id"].rpartition("[")[0]
        if index is not None
        else ti["key"]["task_id"],
        "map_index": index if index is not None else (f"x{count}" if count else None),
        "try": f"{ti['try_number']}/{ti['max_tries']}",
        "worker": ti["worker_id"] or None,
    }


def try_number(text: str) -> int:
    """argparse type of --try: 1..MAX_TRY_NUMBER (a request field of 32 bits)."""
    from raftsched.core import limits

    value = positive_int(text)
    if value > limits.MAX_TRY_NUMBER:
        raise argparse.ArgumentTypeError(
            f"expected a try number from 1 to {limits.MAX_TRY_NUMBER}, got {text!r}"
        )
    return value


def cmd_logs(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2

    request = dag_pb2.GetTaskLogRequest(
        dag_id=args.dag_id,
        run_id=args.run_id,
        task_id=args.task_id,
        try_number=args.try_number or 0,
        follow=args.follow,
    )
    out = sys.stdout
    try:
        with connect(args) as client, cluster_call("tasks logs", not_found=RUN_NOT_FOUND):
            for chunk in client.dags.GetTaskLog(request, timeout=args.timeout):
                if args.output == "json":
                    item = {
                        "seq": chunk.seq,
                        "try_number": chunk.try_number,
                        "stream": chunk.stream,
                        "text": chunk.text,
                        "created_at": iso(chunk.created_at),
                    }
                    out.write(json.dumps(item, sort_keys=True) + "\n")
                else:
                    out.write(chunk.text)
                out.flush()
    except BrokenPipeError:  # `raftsched tasks logs ... | head`: the reader has had enough
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (no flush error at exit)
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2

    request = dag_pb2.ClearTasksRequest(
        dag_id=args.dag_id,
        run_id=args.run_id,
        task_ids=args.task_ids,
        include_downstream=args.downstream,
    )
    with (
        connect(args) as client,
        cluster_call("tasks clear", role="operator", not_found=RUN_NOT_FOUND),
    ):
        response = client.dags.ClearTasks(request)
    cleared = list(response.cleared_task_ids)
    if args.output == "json":
        emit({"cleared_task_ids": cleared}, output="json")
    else:
        print(f"cleared: {', '.join(cleared)}" if cleared else "no task cleared")
    return 0


def cmd_mark(args: argparse.Namespace) -> int:
    from raftsched.api.gen import common_pb2, dag_pb2

    request = dag_pb2.MarkTasksRequest(
        dag_id=args.dag_id,
        run_id=args.run_id,
        task_ids=args.task_ids,
        state=common_pb2.TaskState.Value(f"TASK_STATE_{args.state.upper()}"),
    )
    with (
        connect(args) as client,
        cluster_call("tasks mark", role="operator", not_found=RUN_NOT_FOUND),
    ):
        response = client.dags.MarkTasks(request)
    marked = list(response.marked_task_ids)
    if args.output == "json":
        emit({"marked_task_ids": marked, "state": args.state}, output="json")
    else:
        print(f"marked {args.state}: {', '.join(marked)}" if marked else "no task changed")
    return 0
