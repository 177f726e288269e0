"""``raftsched tasks render DAG_ID RUN_ID TASK_ID`` (role viewer): a task's command, env values
or kwargs as its attempt runs them, rendered by the worker's own function
(:mod:`raftsched.dags.templating`) from the run's committed conf and dates and the DAG's
params. ``--output json``: ``{"command"|"kwargs", "env"}`` or ``{"error"}``. Exit 1 when a
template cannot be rendered (the attempt would fail with the same message)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from raftsched.cli.connect import add_connection_flags, cluster_call, connect
from raftsched.cli.dags_cmd import text_arg
from raftsched.cli.output import emit
from raftsched.errors import RaftschedError

NOT_FOUND = "{detail}: `raftsched tasks list DAG_ID RUN_ID` shows a run's tasks"


def register(tasks_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    render = tasks_sub.add_parser(
        "render", help="a task's command, env or kwargs with its templates rendered"
    )
    render.add_argument("dag_id", type=text_arg)
    render.add_argument("run_id", type=text_arg)
    render.add_argument("task_id", type=text_arg)
    add_connection_flags(render)
    render.set_defaults(handler=cmd_render)


def cmd_render(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2
    from raftsched.api.wire import when
    from raftsched.core.model import TaskSpec
    from raftsched.dags.templating import render_for_display

    with connect(args) as client, cluster_call("tasks render", not_found=NOT_FOUND):
        dag = client.dags.GetDag(dag_pb2.GetDagRequest(dag_id=args.dag_id))
        request = dag_pb2.ListTaskInstancesRequest(dag_id=args.dag_id, run_id=args.run_id)
        instances = client.dags.ListTaskInstances(request)
    task = next((t for t in dag.tasks if t.task_id == args.task_id), None)
    if task is None:
        raise RaftschedError(f"DAG {args.dag_id!r} has no task {args.task_id!r}")
    ti = next((t for t in instances.task_instances if t.key.task_id == args.task_id), None)
    run = instances.run
    rendered: dict[str, Any] = render_for_display(
        TaskSpec(
            task.task_id,
            task.kind,
            command=task.command,
            env=tuple(sorted(task.env.items())),
            kwargs_json=task.kwargs_json or "{}",
        ),
        dag_id=args.dag_id,
        run_id=args.run_id,
        try_number=ti.try_number if ti is not None else 0,
        logical_date=when(run, "logical_date"),
        data_interval_start=when(run, "data_interval_start"),
        data_interval_end=when(run, "data_interval_end"),
        conf=json.loads(run.conf_json or "{}"),
        params_json=dag.dag.params_json,
        asset_events_json=run.asset_events_json,
    )
    if args.output == "json":
        emit(rendered, output="json")
    elif "error" in rendered:
        print(rendered["error"], file=sys.stderr)
    else:
        if "command" in rendered:
            print(rendered["command"])
        if "kwargs" in rendered:
            print(json.dumps(rendered["kwargs"], indent=2, ensure_ascii=False))
        for name, value in rendered["env"]:
            print(f"env {name}={value}")
    return 1 if "error" in rendered else 0
