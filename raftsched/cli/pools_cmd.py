"""`raftsched pools`: named slot counts that bound how many attempts of their tasks run at once.

    raftsched pools list                               (role viewer)
    raftsched pools set etl 4 [--description TEXT]     (role operator: create or resize)
    raftsched pools delete etl                          (role operator)

A task names its pool with ``pool=`` (else ``default_pool``, unlimited until it is set here)
and takes ``pool_slots=`` slots of it per attempt. Flags and errors: ``connect.py``.
"""

from __future__ import annotations

import argparse

from raftsched.cli.common import usage
from raftsched.cli.connect import add_connection_flags, cluster_call, connect, to_dict
from raftsched.cli.output import emit

UNLIMITED = -1  # ListPools' slots of default_pool while it is not set


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("pools", help="pools: how many attempts of their tasks run at once")
    pools_sub = parser.add_subparsers(dest="pools_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=lambda _args: usage(parser))

    lst = pools_sub.add_parser(
        "list", help="every pool: slots, slots in use, tasks waiting (role viewer)"
    )
    add_connection_flags(lst)
    lst.set_defaults(handler=cmd_list)

    put = pools_sub.add_parser(
        "set",
        help="create a pool or change its slots (role operator)",
        description="Create a pool or change its slots. Shrinking a pool stops nothing: it"
        " grants no new attempt until enough of its running ones end. default_pool, the pool"
        " of tasks that name none, is unlimited until it is set.",
    )
    put.add_argument("name", metavar="NAME")
    put.add_argument("slots", metavar="SLOTS", type=int, help="0 to 1,000,000")
    put.add_argument("--description", default="", help="free text shown by list")
    add_connection_flags(put)
    put.set_defaults(handler=cmd_set)

    delete = pools_sub.add_parser(
        "delete",
        help="delete a pool (role operator)",
        description="Delete a pool: its running attempts go on, its queued tasks wait until"
        " it is set again. Deleting default_pool makes it unlimited again.",
    )
    delete.add_argument("name", metavar="NAME")
    add_connection_flags(delete)
    delete.set_defaults(handler=cmd_delete)


def cmd_list(args: argparse.Namespace) -> int:
    from raftsched.api.gen import pool_pb2

    with connect(args) as client, cluster_call("pools list", role="viewer"):
        response = client.pools.ListPools(pool_pb2.ListPoolsRequest())
    rows = [
        {
            "pool": p.name,
            "slots": None if p.slots == UNLIMITED else p.slots,
            "running_slots": p.running_slots,
            "queued_tasks": p.queued_tasks,
            "description": p.description,
            "updated_at": to_dict(p).get("updated_at"),
        }
        for p in response.pools
    ]
    if args.output == "json":
        emit({"pools": rows}, output="json")
    else:
        shown = [
            {**row, "slots": "unlimited" if row["slots"] is None else row["slots"]} for row in rows
        ]
        columns = ("pool", "slots", "running_slots", "queued_tasks", "description")
        emit(shown, output="table", columns=columns)
    return 0


def cmd_set(args: argparse.Namespace) -> int:
    from raftsched.api.gen import pool_pb2

    request = pool_pb2.SetPoolRequest(
        name=args.name, slots=args.slots, description=args.description
    )
    with connect(args) as client, cluster_call("pools set", role="operator"):
        response = client.pools.SetPool(request)
    if args.output == "json":
        emit({"pool": args.name, "slots": args.slots, "changed": response.changed}, output="json")
    else:
        said = "set" if response.changed else "unchanged"
        print(f"pool {args.name!r} {said}: {args.slots} slot(s)")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from raftsched.api.gen import pool_pb2

    with connect(args) as client, cluster_call("pools delete", role="operator"):
        client.pools.DeletePool(pool_pb2.DeletePoolRequest(name=args.name))
    if args.output == "json":
        emit({"pool": args.name, "deleted": True}, output="json")
    else:
        print(f"pool {args.name!r} deleted")
    return 0
