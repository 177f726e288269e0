"""`raftsched users create|list|delete`: web UI accounts (role admin).

``create USERNAME --role admin|operator|viewer`` reads the password from stdin with
``--password-stdin`` (one line, for scripts: ``printf %s "$PW" | raftsched users create ...``)
or prompts for it twice on the terminal. There is no ``--password`` flag: it would land in the
shell's history and the process list. ``--replace`` changes an existing user's password and
role. Flags and errors: ``connect.py``.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from raftsched.cli.common import usage
from raftsched.cli.connect import add_connection_flags, cluster_call, connect, to_dict
from raftsched.cli.dags_cmd import text_arg
from raftsched.cli.output import emit
from raftsched.errors import ConfigError, RaftschedError

ROLES = ("admin", "operator", "viewer")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    users = sub.add_parser("users", help="web UI accounts: create, list, delete")
    users_sub = users.add_subparsers(dest="users_command", metavar="SUBCOMMAND")
    users.set_defaults(handler=lambda _args: usage(users))

    create = users_sub.add_parser(
        "create",
        help="create a web UI user (needs role admin)",
        description="Create a web UI user. The password comes from --password-stdin or is"
        " asked twice on the terminal; it is stored only as a salted hash.",
    )
    create.add_argument("username", type=text_arg)
    create.add_argument("--role", required=True, choices=ROLES)
    create.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin (one line)"
    )
    create.add_argument(
        "--replace", action="store_true", help="replace an existing user's password and role"
    )
    add_connection_flags(create)
    create.set_defaults(handler=cmd_create)

    lst = users_sub.add_parser("list", help="every user and role (needs role admin)")
    add_connection_flags(lst)
    lst.set_defaults(handler=cmd_list)

    delete = users_sub.add_parser("delete", help="delete a user (needs role admin)")
    delete.add_argument("username", type=text_arg)
    add_connection_flags(delete)
    delete.set_defaults(handler=cmd_delete)


def read_password(from_stdin: bool) -> str:
    if from_stdin:
        try:
            password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
        except UnicodeDecodeError:
            raise RaftschedError("--password-stdin: stdin is not valid UTF-8 text") from None
        if not password:
            raise RaftschedError("--password-stdin: stdin gave an empty password")
        return _clean_password(password)
    if not sys.stdin.isatty():
        raise ConfigError("no terminal to ask the password on: pass --password-stdin")
    password = getpass.getpass("Password: ")
    if not password:
        raise RaftschedError("empty password; nothing was created")
    if getpass.getpass("Repeat password: ") != password:
        raise RaftschedError("the passwords do not match; nothing was created")
    return _clean_password(password)


def _clean_password(password: str) -> str:
    from raftsched.core import limits

    if not limits.is_clean(password):
        raise RaftschedError("the password is not valid UTF-8 text (or holds a NUL)")
    return password


def cmd_create(args: argparse.Namespace) -> int:
    from raftsched.api.gen import user_pb2

    password = read_password(args.password_stdin)
    request = user_pb2.CreateUserRequest(
        username=args.username, password=password, role=args.role, replace=args.replace
    )
    with connect(args) as client, cluster_call("users create", role="admin"):
        user = to_dict(client.users.CreateUser(request))
    if args.output == "json":
        emit({"user": user}, output="json")
    else:
        done = "replaced" if args.replace else "created"
        print(f"user {user['username']!r} {done} with role {user['role']}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from raftsched.api.gen import user_pb2

    with connect(args) as client, cluster_call("users list", role="admin"):
        response = client.users.ListUsers(user_pb2.ListUsersRequest())
    users = [to_dict(user) for user in response.users]
    if args.output == "json":
        emit({"users": users}, output="json")
    else:
        emit(users, output="table", columns=("username", "role", "created_at"))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from raftsched.api.gen import user_pb2

    with connect(args) as client, cluster_call("users delete", role="admin"):
        response = client.users.DeleteUser(user_pb2.DeleteUserRequest(username=args.username))
    if not response.deleted:
        raise RaftschedError(
            f"user {args.username!r} not found: `raftsched users list` shows the users"
        )
    if args.output == "json":
        emit({"username": args.username, "deleted": True}, output="json")
    else:
        print(f"user {args.username!r} deleted")
    return 0
