"""`raftsched variables|connections|secrets`: values for tasks, stored encrypted.

    raftsched variables set API_TOKEN s3cr3t            (or --stdin: keeps it off the command
    raftsched variables get API_TOKEN [--reveal]         line, which other users can read;
    raftsched variables set API_TOKEN s3cr3t --dags a,b  --dags: only those DAGs may read it)
    raftsched variables list
    raftsched variables delete API_TOKEN
    raftsched connections add warehouse 'postgresql://bob:pw@db:5432/app?sslmode=require'
    raftsched connections get warehouse [--reveal]      (parts, password masked)
    raftsched connections list | delete warehouse
    raftsched variables|connections import FILE | export [FILE]   (Airflow's JSON files:
                                                        ``secrets_io_cmd``)
    raftsched secrets rotate                            (re-encrypt with the first key)

Writing and ``--reveal`` need role admin; ``get`` operator; ``list`` (names only) viewer.
Flags and errors: ``connect.py``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raftsched.cli import secrets_io_cmd
from raftsched.cli.common import usage
from raftsched.cli.connect import add_connection_flags, cluster_call, connect, to_dict
from raftsched.cli.output import emit
from raftsched.errors import RaftschedError

KINDS = {"variables": "variable", "connections": "connection"}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    for group, kind in KINDS.items():
        _register_kind(sub, group, kind)
    secrets = sub.add_parser("secrets", help="the encryption of variables and connections")
    secrets_sub = secrets.add_subparsers(dest="secrets_command", metavar="SUBCOMMAND")
    secrets.set_defaults(handler=lambda _args: usage(secrets))
    rotate = secrets_sub.add_parser(
        "rotate",
        help="re-encrypt every value with the first key of [secrets] fernet_key (admin)",
        description="Re-encrypt every variable and connection with the first key of [secrets]"
        " fernet_key. Put the new key first on every node (keeping the old one after it),"
        " restart them, run this, then drop the old key.",
    )
    add_connection_flags(rotate)
    rotate.set_defaults(handler=cmd_rotate)


def _register_kind(sub: argparse._SubParsersAction, group: str, kind: str) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(group, help=f"{kind}s for tasks, stored encrypted")
    kind_sub = parser.add_subparsers(dest=f"{group}_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=lambda _args: usage(parser))
    what = "URI" if kind == "connection" else "VALUE"

    put = kind_sub.add_parser(
        "add" if kind == "connection" else "set",
        aliases=["set"] if kind == "connection" else [],
        help=f"create or replace a {kind} (needs role admin)",
        description=f"Create or replace a {kind}. The value is encrypted by the node before it"
        " is replicated. A value on the command line is visible to other local users while the"
        " command runs (and stays in the shell's history): prefer --stdin.",
    )
    put.add_argument("key", metavar="NAME" if kind == "variable" else "CONN_ID")
    put.add_argument("value", metavar=what, nargs="?", help=f"the {what.lower()} (or --stdin)")
    put.add_argument("--stdin", action="store_true", help=f"read the {what.lower()} from stdin")
    put.add_argument("--description", default="", help="free text shown by list")
    put.add_argument(
        "--dags",
        default="",
        metavar="DAG_ID,...",
        help=f"only tasks of these DAGs may read the {kind} (default: every DAG, as in"
        " Airflow); setting it again without --dags lifts the restriction",
    )
    add_connection_flags(put)
    put.set_defaults(handler=cmd_set, kind=kind)

    get = kind_sub.add_parser(
        "get",
        help=f"show a {kind}, its secret part masked (needs role operator)",
    )
    get.add_argument("key", metavar="NAME" if kind == "variable" else "CONN_ID")
    get.add_argument("--reveal", action="store_true", help="show the value (needs role admin)")
    add_connection_flags(get)
    get.set_defaults(handler=cmd_get, kind=kind)

    lst = kind_sub.add_parser("list", help=f"names of every {kind}, no values (role viewer)")
    add_connection_flags(lst)
    lst.set_defaults(handler=cmd_list, kind=kind)

    delete = kind_sub.add_parser("delete", help=f"delete a {kind} (needs role admin)")
    delete.add_argument("key", metavar="NAME" if kind == "variable" else "CONN_ID")
    add_connection_flags(delete)
    delete.set_defaults(handler=cmd_delete, kind=kind)

    secrets_io_cmd.register(kind_sub, kind)  # import FILE / export [FILE]: Airflow's JSON


def _value(args: argparse.Namespace) -> str:
    if args.stdin:
        if args.value is not None:
            raise RaftschedError("give the value either as an argument or with --stdin, not both")
        try:
            value = sys.stdin.read().removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            raise RaftschedError("--stdin: stdin is not valid UTF-8 text") from None
    elif args.value is None:
        raise RaftschedError("no value: give it after the name, or pass --stdin")
    else:
        value = args.value
    if not value:
        raise RaftschedError("empty value; nothing was set")
    return value


def cmd_set(args: argparse.Namespace) -> int:
    from raftsched.api.gen import secret_pb2

    request = secret_pb2.SetSecretRequest(
        kind=args.kind,
        key=args.key,
        value=_value(args),
        description=args.description,
        dags=[d.strip() for d in args.dags.split(",") if d.strip()],
    )
    with connect(args) as client, cluster_call(f"{args.kind}s set", role="admin"):
        response = client.secrets.SetSecret(request)
    if args.output == "json":
        emit({"kind": args.kind, "key": args.key, "changed": response.changed}, output="json")
    else:
        print(f"{args.kind} {args.key!r} {'set' if response.changed else 'unchanged'}")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    from raftsched.api.gen import secret_pb2

    request = secret_pb2.GetSecretRequest(kind=args.kind, key=args.key, reveal=args.reveal)
    role = "admin" if args.reveal else "operator"
    with connect(args) as client, cluster_call(f"{args.kind}s get", role=role):
        secret = client.secrets.GetSecret(request)
    data: dict[str, Any] = {
        "key": secret.key,
        "description": secret.description,
        "updated_at": to_dict(secret).get("updated_at"),
        "dags": list(secret.dags),  # the DAGs that may read it; []: every DAG
        "value": secret.value if args.reveal else secret.masked,
    }
    if args.kind == "connection":
        parts = secret.connection
        data.update(
            conn_type=parts.conn_type,
            host=parts.host,
            port=parts.port or None,
            login=parts.login,
            password=("***" if parts.has_password else "") if not args.reveal else None,
            schema=parts.schema,
            extra=parts.extra,
            uri=secret.value if args.reveal else secret.masked,
        )
        del data["value"]
        if args.reveal:
            del data["password"]
    if args.output == "json":
        emit(data, output="json")
    else:
        width = max(len(k) for k in data)
        data["dags"] = ",".join(data["dags"]) or "(every DAG)"
        for name, value in data.items():
            print(f"{name.ljust(width)}  {'' if value is None else value}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from raftsched.api.gen import secret_pb2

    with connect(args) as client, cluster_call(f"{args.kind}s list", role="viewer"):
        response = client.secrets.ListSecrets(secret_pb2.ListSecretsRequest(kind=args.kind))
    rows = [
        {
            "key": s.key,
            "description": s.description,
            "updated_at": to_dict(s).get("updated_at"),
            "dags": ",".join(s.dags),
        }
        for s in response.secrets
    ]
    if args.output == "json":
        emit({f"{args.kind}s": rows}, output="json")
    else:
        emit(rows, output="table", columns=("key", "description", "updated_at", "dags"))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from raftsched.api.gen import secret_pb2

    request = secret_pb2.DeleteSecretRequest(kind=args.kind, key=args.key)
    with connect(args) as client, cluster_call(f"{args.kind}s delete", role="admin"):
        client.secrets.DeleteSecret(request)
    if args.output == "json":
        emit({"kind": args.kind, "key": args.key, "deleted": True}, output="json")
    else:
        print(f"{args.kind} {args.key!r} deleted")
    return 0


def cmd_rotate(args: argparse.Namespace) -> int:
    from raftsched.api.gen import secret_pb2

    with connect(args) as client, cluster_call("secrets rotate", role="admin"):
        response = client.secrets.RotateSecrets(secret_pb2.RotateSecretsRequest())
    if args.output == "json":
        emit({"rotated": response.rotated, "skipped": response.skipped}, output="json")
    else:
        print(
            f"{response.rotated} value(s) re-encrypted with the first key"
            + (f"; {response.skipped} changed meanwhile, left as set" if response.skipped else "")
        )
    return 0
