"""`raftsched assets list|show URI|event URI`: assets, their producers, consumers and events,
and an event from outside (AssetService, docs/architecture.md §21). ``event`` needs role
operator; the others viewer. Flags and errors: ``connect.py``."""

from __future__ import annotations

import argparse
import json

from raftsched.cli.connect import add_connection_flags, cluster_call, connect
from raftsched.cli.output import emit
from raftsched.errors import RaftschedError

LIST_COLUMNS = ("uri", "producers", "consumers", "events", "last_event", "queued_for")
EVENT_COLUMNS = ("id", "timestamp", "source", "event_id", "extra")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    assets = sub.add_parser(
        "assets",
        help="assets: producers, consumers, events; send an event",
        description="Assets (URIs) that tasks name in outlets= and DAGs in schedule=[...].",
    )
    verbs = assets.add_subparsers(dest="assets_command", metavar="SUBCOMMAND", required=True)
    listing = verbs.add_parser("list", help="every asset, with producers and consumers")
    add_connection_flags(listing)
    listing.set_defaults(handler=cmd_list)
    show = verbs.add_parser("show", help="one asset and its newest events")
    show.add_argument("uri", metavar="URI")
    show.add_argument("--limit", type=int, default=25, help="newest events to show (1..100)")
    add_connection_flags(show)
    show.set_defaults(handler=cmd_show)
    event = verbs.add_parser(
        "event",
        help="send an asset event (runs the DAGs it satisfies)",
        description="Send an event of URI, as a task with it in outlets= would on success:"
        " every DAG whose schedule it satisfies gets one run. With --id, sending the same id"
        " again makes nothing new (safe to retry). Needs role operator.",
    )
    event.add_argument("uri", metavar="URI")
    event.add_argument("--extra", default="{}", help="a JSON object (at most 4 KiB)")
    event.add_argument("--id", dest="event_id", default="", help="the event's id (idempotency)")
    add_connection_flags(event)
    event.set_defaults(handler=cmd_event)


def _summary_row(summary: dict) -> dict:
    last = summary["last_event"]
    return {
        "uri": summary["uri"],
        "producers": ", ".join(summary["producers"]) or None,
        "consumers": ", ".join(summary["consumers"]) or None,
        "events": summary["event_count"],
        "last_event": last["timestamp"] if last else None,
        "queued_for": ", ".join(summary["queued_for"]) or None,
    }


def cmd_list(args: argparse.Namespace) -> int:
    from raftsched.api.asset_wire import summary_dict
    from raftsched.api.gen import asset_pb2

    with connect(args) as client, cluster_call("assets list"):
        reply = client.assets.ListAssets(asset_pb2.ListAssetsRequest())
    found = [summary_dict(s) for s in reply.assets]
    if args.output == "json":
        emit(found, output="json")
        return 0
    emit([_summary_row(s) for s in found], output="table", columns=LIST_COLUMNS)
    print(f"{len(found)} asset(s)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from raftsched.api.asset_wire import event_dict, summary_dict
    from raftsched.api.gen import asset_pb2

    request = asset_pb2.GetAssetRequest(uri=args.uri, limit=max(1, min(args.limit, 100)))
    with connect(args) as client, cluster_call("assets show", not_found="{detail}"):
        reply = client.assets.GetAsset(request)
    summary = summary_dict(reply.summary)
    events = [event_dict(e) for e in reply.events]
    if args.output == "json":
        emit({**summary, "events": events}, output="json")
        return 0
    emit([_summary_row(summary)], output="table", columns=LIST_COLUMNS)
    rows = [
        {
            **e,
            "source": (
                f"{e['source_dag_id']}.{e['source_task_id']} ({e['source_run_id']})"
                if e["source_dag_id"]
                else f"outside ({e['actor'] or '-'})"
            ),
            "event_id": e["event_id"] or None,
            "extra": json.dumps(e["extra"]) if e["extra"] else None,
        }
        for e in events
    ]
    print()
    emit(rows, output="table", columns=EVENT_COLUMNS)
    return 0


def cmd_event(args: argparse.Namespace) -> int:
    from raftsched.api.gen import asset_pb2

    try:
        extra = json.loads(args.extra)
    except ValueError as err:
        raise RaftschedError(f"--extra is not JSON: {err}") from None
    if not isinstance(extra, dict):
        raise RaftschedError("--extra must be a JSON object, e.g. '{\"rows\": 10}'")
    request = asset_pb2.EmitAssetEventRequest(
        uri=args.uri, extra_json=json.dumps(extra), event_id=args.event_id
    )
    with connect(args) as client, cluster_call("assets event", role="operator"):
        reply = client.assets.EmitAssetEvent(request)
    runs = [{"dag_id": r.dag_id, "run_id": r.run_id} for r in reply.runs]
    out = {"id": reply.id, "duplicate": reply.duplicate, "runs": runs}
    if args.output == "json":
        emit(out, output="json")
        return 0
    what = "seen before: nothing new" if reply.duplicate else "committed"
    print(f"event {reply.id} of {args.uri} {what}")
    for run in runs:
        print(f"  run {run['dag_id']} {run['run_id']}")
    return 0
