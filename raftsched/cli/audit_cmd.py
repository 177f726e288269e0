"""`raftsched audit`: who triggered, paused, cleared, marked, backfilled or changed a variable
or connection, and when, newest first (core/audit.py; the replicated window and the DB's
history, ClusterService.ListAuditRecords). Needs role admin. Flags and errors: ``connect.py``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from raftsched.cli.connect import add_connection_flags, cluster_call, connect
from raftsched.cli.output import emit

COLUMNS = ("id", "at", "actor", "action", "dag_id", "run_id", "detail")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    audit = sub.add_parser(
        "audit",
        help="who changed what, and when (newest first)",
        description="Who triggered, paused, unpaused, cleared, marked, backfilled, or set or"
        " deleted a variable or connection, and when, newest first: a token's name"
        " ([api] token_names) or '<user> via <token>' for the web UI's users. Survives"
        " failover (it is replicated) and is kept whole in the metadata DB. Needs role admin.",
    )
    audit.add_argument("--since", type=_iso_time, help="only records at or after this time")
    audit.add_argument("--dag", default="", help="only records about this DAG")
    audit.add_argument(
        "--actor", default="", help="only this actor (a token's name, or a web user's name)"
    )
    audit.add_argument("--limit", type=int, default=100, help="at most this many (1..1000)")
    audit.add_argument("--before-id", type=int, default=0, help="only records older than this id")
    add_connection_flags(audit)
    audit.set_defaults(handler=cmd_audit)


def _iso_time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO-8601 time, e.g. 2024-10-27T00:00:00+02:00"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _row(record: dict[str, Any]) -> dict[str, Any]:
    at = record["at"]
    return {
        **{k: v or None for k, v in record.items()},  # "-" in the table
        "id": record["id"],
        "at": at.isoformat(timespec="seconds") if at is not None else None,
    }


def cmd_audit(args: argparse.Namespace) -> int:
    from raftsched.api.audit_view import audit_dicts
    from raftsched.api.gen import cluster_pb2
    from raftsched.api.servicers.convert import ts

    request = cluster_pb2.ListAuditRecordsRequest(
        dag_id=args.dag, actor=args.actor, limit=args.limit, before_id=args.before_id
    )
    if args.since is not None:
        request.since.CopyFrom(ts(args.since))
    with connect(args) as client, cluster_call("audit", role="admin"):
        found = audit_dicts(client.cluster.ListAuditRecords(request))
    records = [_row(record) for record in found]
    if args.output == "json":
        emit(records, output="json")
        return 0
    emit(records, output="table", columns=COLUMNS)
    print(f"{len(records)} record(s)")
    return 0
