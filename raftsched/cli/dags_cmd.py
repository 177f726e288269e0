"""`raftsched dags ...`: DAG files and schedules.

Local subcommands (no cluster needed): ``parse`` checks a DAGs folder the way the scheduler
would; ``next`` previews a DAG's next slots (in :mod:`raftsched.cli.dags_local_cmd`).

Subcommands that ask the cluster (through ``raftsched.api.client`` only; flags and errors in
``connect.py``): ``list``, ``show``, ``explain``, ``errors`` (role viewer) and ``pause``,
``unpause``, ``trigger``, ``backfill`` (role operator). ``--conf`` is checked to be a JSON
object within the cluster's bounds (``raftsched.core.limits``: size, depth) and the dates to
be within its range before any call (a usage error, exit 2, otherwise); a refusal by the
server is one line with its message (exit 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

from raftsched.cli import dags_show_cmd
from raftsched.cli.common import usage
from raftsched.cli.connect import add_connection_flags, cluster_call, connect, to_dict
from raftsched.cli.dags_local_cmd import _parse as _parse  # re-exported (dags_test_cmd)
from raftsched.cli.dags_local_cmd import _parse_after as _parse_after
from raftsched.cli.dags_local_cmd import cmd_next, cmd_parse
from raftsched.cli.dags_show_cmd import DAG_NOT_FOUND as DAG_NOT_FOUND
from raftsched.cli.main import EXIT_USAGE
from raftsched.cli.output import add_output_flag, emit
from raftsched.errors import LimitExceeded


def text_arg(text: str) -> str:
    """argparse type of ids and names: text the API can carry (argv bytes that are not UTF-8
    arrive as lone surrogates, which no request can hold)."""
    from raftsched.core import limits

    if not limits.is_clean(text):
        raise argparse.ArgumentTypeError(
            f"{limits.clean_text(text)[:80]!r} is not valid UTF-8 text (or holds a NUL)"
        )
    return text


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    dags = sub.add_parser("dags", help="DAG files, schedules and DAG state")
    dags_sub = dags.add_subparsers(dest="dags_command", metavar="SUBCOMMAND")
    dags.set_defaults(handler=lambda args: usage(dags))

    parse = dags_sub.add_parser(
        "parse", help="parse a DAGs folder (each file in a child process) and report"
    )
    parse.add_argument("folder", nargs="?", help="default: [core] dags_folder of the config")
    add_output_flag(parse)
    parse.set_defaults(handler=cmd_parse)

    nxt = dags_sub.add_parser("next", help="preview the next scheduled slots of a DAG")
    nxt.add_argument("dag_id")
    nxt.add_argument("--folder", help="DAGs folder (default: [core] dags_folder of the config)")
    nxt.add_argument(
        "--after",
        metavar="ISO_TIME",
        help="slots strictly after this time (default: now); without an offset it is UTC",
    )
    nxt.add_argument("-n", type=int, default=5, metavar="N", help="how many slots (default 5)")
    add_output_flag(nxt)
    nxt.set_defaults(handler=cmd_next)

    lst = dags_sub.add_parser("list", help="DAGs the cluster knows, with next and last runs")
    lst.add_argument("--search", default="", help="substring of dag_id or description")
    lst.add_argument("--tag", action="append", default=[], help="only DAGs with this tag")
    paused = lst.add_mutually_exclusive_group()
    paused.add_argument("--paused", dest="paused", action="store_true", default=None)
    paused.add_argument("--unpaused", dest="paused", action="store_false")
    lst.add_argument(
        "--include-inactive", action="store_true", help="also DAGs no file defines anymore"
    )
    add_connection_flags(lst)
    lst.set_defaults(handler=cmd_list)

    dags_show_cmd.register(dags_sub, text_arg=text_arg, iso_time=_iso_time)

    for name, what in (("pause", "stop scheduling"), ("unpause", "resume scheduling")):
        change = dags_sub.add_parser(name, help=f"{what} a DAG (needs role operator)")
        change.add_argument("dag_id", type=text_arg)
        if name == "pause":
            change.add_argument(
                "--note", type=text_arg, default="", help="why (shown with the DAG until unpaused)"
            )
        add_connection_flags(change)
        change.set_defaults(handler=cmd_pause if name == "pause" else cmd_unpause)

    trigger = dags_sub.add_parser(
        "trigger", help="create a manual run of a DAG now (needs role operator)"
    )
    trigger.add_argument("dag_id", type=text_arg)
    trigger.add_argument(
        "--conf", type=_json_object, metavar="JSON", help="the run's conf, a JSON object"
    )
    trigger.add_argument(
        "--logical-date",
        type=_iso_time,
        metavar="ISO_TIME",
        help="the run's logical date (default: now); without an offset it is UTC",
    )
    trigger.add_argument(
        "--run-id", default="", type=text_arg, help="default: manual__<logical date>"
    )
    add_connection_flags(trigger)
    trigger.set_defaults(handler=cmd_trigger)

    backfill = dags_sub.add_parser(
        "backfill",
        help="create a run for every slot in a range that has none (needs role operator)",
        description="Create a run for every slot of the DAG's schedule whose logical date is"
        " between --start-date and --end-date (both included) and that has no run yet."
        " Existing runs are left as they are, so it is safe to repeat. Run ids are"
        " backfill__<logical date>.",
    )
    backfill.add_argument("dag_id", type=text_arg)
    for flag, what in (("--start-date", "first"), ("--end-date", "last")):
        backfill.add_argument(
            flag,
            "-s" if flag == "--start-date" else "-e",
            type=_iso_time,
            required=True,
            metavar="ISO_TIME",
            help=f"the {what} logical date to fill, included; without an offset it is UTC",
        )
    backfill.add_argument(
        "--conf", type=_json_object, metavar="JSON", help="every run's conf, a JSON object"
    )
    backfill.add_argument(
        "--dry-run", action="store_true", help="only list the runs it would create"
    )
    add_connection_flags(backfill)
    backfill.set_defaults(handler=cmd_backfill)

    from raftsched.cli import dags_test_cmd

    dags_test_cmd.register(dags_sub)

    errors = dags_sub.add_parser("errors", help="DAG files that failed to load")
    add_connection_flags(errors)
    errors.set_defaults(handler=cmd_errors)


# -- dags list | show | pause | unpause | trigger | errors (the cluster) --------------------


def _json_object(text: str) -> str:
    """argparse type of --conf: a JSON object within the cluster's bounds (size, depth, clean
    strings), checked here for an immediate clear error; deep nesting is refused before
    json.loads could recurse."""
    from raftsched.core import limits

    try:
        limits.parse_conf(text, "conf")
    except LimitExceeded as err:  # the two common mistakes keep their own wording below
        if not err.problem.startswith(("is not valid JSON", "must be a JSON object")):
            raise argparse.ArgumentTypeError(str(err)) from None
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object like '{{\"key\": 1}}', got {type(value).__name__}"
        )
    return text


def _iso_time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO-8601 time, e.g. 2024-10-27T00:00:00+02:00"
        ) from None
    value = value if value.tzinfo else value.replace(tzinfo=UTC)
    from raftsched.core import limits

    try:
        limits.check_datetime("the time", value)
    except LimitExceeded as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None
    return value


def _dag_row(dag: dict[str, Any]) -> dict[str, Any]:
    recent = dag["recent_runs"]
    return {
        "dag_id": dag["dag_id"],
        "paused": dag["paused"],
        "schedule": (dag["schedule"] or {}).get("display") or None,
        "timezone": dag["timezone"],
        "next_run": (dag["next_run"] or {}).get("logical_date"),
        "last_run": f"{recent[0]['state']} {recent[0]['logical_date']}" if recent else None,
        "tasks": dag["task_count"],
    }


def cmd_list(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2

    request = dag_pb2.ListDagsRequest(
        search=args.search, tags=args.tag, include_inactive=args.include_inactive, recent_runs=5
    )
    if args.paused is not None:
        request.paused = args.paused
    dags: list[dict[str, Any]] = []
    with connect(args) as client, cluster_call("dags list"):
        while True:
            response = client.dags.ListDags(request)
            dags += [to_dict(dag) for dag in response.dags]
            if not response.next_page_token:
                break
            request.page_token = response.next_page_token
    if args.output == "json":
        emit({"dags": dags, "total_size": len(dags)}, output="json")
        return 0
    columns = ("dag_id", "paused", "schedule", "timezone", "next_run", "last_run", "tasks")
    emit([_dag_row(dag) for dag in dags], output="table", columns=columns)
    return 0


def _set_paused(args: argparse.Namespace, pause: bool) -> int:
    from raftsched.api.gen import dag_pb2

    verb = "pause" if pause else "unpause"
    not_found = DAG_NOT_FOUND.format(dag_id=args.dag_id)
    with (
        connect(args) as client,
        cluster_call(f"dags {verb}", role="operator", not_found=not_found),
    ):
        if pause:
            request = dag_pb2.PauseDagRequest(dag_id=args.dag_id, note=args.note)
            response = client.dags.PauseDag(request)
        else:
            response = client.dags.UnpauseDag(dag_pb2.UnpauseDagRequest(dag_id=args.dag_id))
    if args.output == "json":
        emit(
            {"dag_id": args.dag_id, "paused": pause, "changed": response.changed},
            output="json",
        )
    elif response.changed:
        print(f"dag {args.dag_id!r} {verb}d")
    else:
        print(f"dag {args.dag_id!r} was already {verb}d")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    return _set_paused(args, pause=True)


def cmd_unpause(args: argparse.Namespace) -> int:
    return _set_paused(args, pause=False)


def cmd_trigger(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2
    from raftsched.cli.connect import to_timestamp

    request = dag_pb2.TriggerDagRequest(
        dag_id=args.dag_id, conf_json=args.conf or "", run_id=args.run_id
    )
    if args.logical_date is not None:
        request.logical_date.CopyFrom(to_timestamp(args.logical_date))
    not_found = DAG_NOT_FOUND.format(dag_id=args.dag_id)
    with (
        connect(args) as client,
        cluster_call(
            "dags trigger",
            role="operator",
            not_found=not_found,
            already_exists="{detail}: pass another --run-id or --logical-date",
        ),
    ):
        response = client.dags.TriggerDag(request)
    run = to_dict(response.run)
    if args.output == "json":
        emit({"run": run}, output="json")
        return 0
    print(f"triggered {run['dag_id']} run {run['run_id']} (logical date {run['logical_date']})")
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2
    from raftsched.cli.connect import to_timestamp

    if args.end_date < args.start_date:
        print("raftsched dags backfill: error: --end-date is before --start-date", file=sys.stderr)
        return EXIT_USAGE
    request = dag_pb2.BackfillDagRequest(
        dag_id=args.dag_id,
        start_date=to_timestamp(args.start_date),
        end_date=to_timestamp(args.end_date),
        conf_json=args.conf or "",
        dry_run=args.dry_run,
    )
    not_found = DAG_NOT_FOUND.format(dag_id=args.dag_id)
    with (
        connect(args) as client,
        cluster_call("dags backfill", role="operator", not_found=not_found),
    ):
        response = client.dags.BackfillDag(request)
    runs = [to_dict(run) for run in response.runs]
    skipped = [stamp.ToDatetime(tzinfo=UTC).isoformat() for stamp in response.skipped]
    if args.output == "json":
        emit({"runs": runs, "skipped": skipped, "dry_run": args.dry_run}, output="json")
        return 0
    verb = "would create" if args.dry_run else "created"
    print(f"{verb} {len(runs)} run(s) of {args.dag_id}; {len(skipped)} slot(s) already had one")
    if runs:
        emit(runs, output="table", columns=("run_id", "logical_date", "state"))
    return 0


def cmd_errors(args: argparse.Namespace) -> int:
    from raftsched.api.gen import dag_pb2

    with connect(args) as client, cluster_call("dags errors"):
        response = client.dags.ListImportErrors(dag_pb2.ListImportErrorsRequest())
    errors = [to_dict(error) for error in response.import_errors]
    if args.output == "json":
        emit({"import_errors": errors}, output="json")
    elif errors:
        emit(errors, output="table", columns=("fileloc", "message"))
    else:
        print("no import errors")
    return 0
