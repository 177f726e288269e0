"""How the admin subcommands reach the cluster: where, with which token, and what a failure
means to the person at the terminal.

Every admin command takes ``--server``, ``--token``, ``--timeout``, ``--consistent`` and
``--output`` (:func:`add_connection_flags`), before or after the subcommand (each flag added
there is hoisted by ``main.hoist_connection_flags``). Where the cluster is, first match wins:
``--server``, ``$RAFTSCHED_SERVER``, else the config's ``[cluster] nodes`` mapped to their
gRPC addresses (:mod:`raftsched.addresses`: Raft port + 200, or ``[api] grpc_bind``'s port).
The token: ``--token``, else ``$RAFTSCHED_TOKEN``; it is never printed, not even as a ``--help``
default. TLS is on when ``[api] tls_ca`` is set.

:func:`cluster_call` turns an :class:`~raftsched.errors.ApiError` into one line that says
what to do, and picks the exit code through the error's type (see ``main.py``): UNAVAILABLE
and DEADLINE_EXCEEDED become :class:`~raftsched.errors.NoQuorumError` (exit 3), the rest a
:class:`~raftsched.errors.RaftschedError` (exit 1).

:func:`to_dict` (from :mod:`raftsched.api.wire`, which the web uses too) turns a response
message into plain JSON-able data.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from raftsched.addresses import cluster_api_addresses
from raftsched.api.wire import enum_short as enum_name
from raftsched.api.wire import iso, to_dict, to_timestamp
from raftsched.cli.output import add_output_flag
from raftsched.errors import ConfigError, NoQuorumError, RaftschedError

if TYPE_CHECKING:  # grpc and protobuf load only when a command talks to the cluster
    from raftsched.api.client import RaftschedClient
    from raftsched.errors import ApiError

__all__ = ["enum_name", "iso", "to_dict", "to_timestamp"]  # the wire conversion, for the commands

DEFAULT_TIMEOUT = 10.0
TOKEN_HINT = "use a token with that role (--token or RAFTSCHED_TOKEN)"


def add_connection_flags(parser: argparse.ArgumentParser, *, timeout_help: str = "") -> None:
    """--server, --token, --timeout and --output, the same on every admin command."""
    parser.add_argument(
        "--server",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="gRPC addresses of the scheduler nodes (default: $RAFTSCHED_SERVER, else the"
        " config's [cluster] nodes at Raft port + 200)",
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        help="API bearer token (default: $RAFTSCHED_TOKEN)",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="SECONDS",
        help=timeout_help or f"give up after this long, retries included ({DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--consistent",
        action="store_true",
        help="linearizable reads: each read first asks the leader for a read index (one Raft"
        " commit) and answers once the node has applied it",
    )
    add_output_flag(parser)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= MAX_TIMEOUT:  # gRPC answers a deadline of ~1e10 s at once: bound it
        raise argparse.ArgumentTypeError(f"expected seconds in (0, {MAX_TIMEOUT:g}], got {text!r}")
    return value


MAX_TIMEOUT = 86_400.0


# -- where and who ----------------------------------------------------------------------------


def resolve_servers(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if env is None else env
    text = getattr(args, "server", None) or env.get("RAFTSCHED_SERVER", "")
    if text:
        servers = [s.strip() for s in text.split(",") if s.strip()]
        for server in servers:
            if not re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^:\s]+):\d{1,5}", server):
                raise ConfigError(
                    f"server address {server!r} (from --server or RAFTSCHED_SERVER): expected"
                    " host:port[,host:port...]",
                    key="server",
                    value=server,
                )
        if servers:
            return servers
    from raftsched.config import load_config

    return cluster_api_addresses(load_config(getattr(args, "config", None), env))


def resolve_token(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    return getattr(args, "token", None) or env.get("RAFTSCHED_TOKEN") or None


@contextmanager
def connect(args: argparse.Namespace) -> Iterator[RaftschedClient]:
    """A client of the cluster named by the flags, the environment and the config. It starts
    from the index this user's earlier commands have seen (README "Consistency") and keeps
    what this one sees for the next."""
    from raftsched.api.client import RaftschedClient, SeenIndex, seen_index_path
    from raftsched.config import load_config

    servers = resolve_servers(args)
    tls_ca = load_config(getattr(args, "config", None)).api.tls_ca
    seen_file = seen_index_path(servers)
    seen = SeenIndex.load(seen_file) if seen_file is not None else SeenIndex()
    client = RaftschedClient(
        servers,
        token=resolve_token(args),
        tls_ca=str(tls_ca) if tls_ca is not None else None,
        deadline=getattr(args, "timeout", None) or DEFAULT_TIMEOUT,
        seen=seen,
        consistency="linearizable" if getattr(args, "consistent", False) else "",
    )
    start = seen.value
    try:
        yield client
    finally:
        client.close()
        if seen_file is not None and seen.value != start:
            seen.save(seen_file)


# -- what a failure means ------------------------------------------------------------------


@contextmanager
def cluster_call(
    command: str, *, role: str = "viewer", not_found: str = "", already_exists: str = ""
) -> Iterator[None]:
    """Turn an ApiError raised inside into one actionable line (and its exit code).

    ``command``: the words after ``raftsched`` (``"dags pause"``); ``role``: the role it
    needs; ``not_found``: the message for NOT_FOUND (``{detail}`` stands for the server's
    message, which is used alone when it already names a ``raftsched`` command);
    ``already_exists``: likewise for ALREADY_EXISTS.
    """
    from raftsched.errors import ApiError

    try:
        yield
    except ApiError as err:
        raise explain(
            err, command=command, role=role, not_found=not_found, already_exists=already_exists
        ) from None


def explain(
    err: ApiError, *, command: str, role: str, not_found: str = "", already_exists: str = ""
) -> RaftschedError:
    import grpc

    code, detail = err.code, err.message.strip() or err.code.name
    if code is grpc.StatusCode.ALREADY_EXISTS and already_exists:
        return RaftschedError(already_exists.replace("{detail}", detail))
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        where = f" ({err.address})" if err.address else ""
        return NoQuorumError(
            f"cluster unavailable{where}: {detail}; retry, or check `raftsched cluster status`"
        )
    if code is grpc.StatusCode.NOT_FOUND and not_found:
        if "{detail}" in not_found and "`raftsched " in detail:
            return RaftschedError(detail)  # the server already named the way out
        return RaftschedError(not_found.replace("{detail}", detail))
    if code is grpc.StatusCode.PERMISSION_DENIED:
        return RaftschedError(
            f"`raftsched {command}` needs role {role}; {TOKEN_HINT} (server: {detail})"
        )
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return RaftschedError(f"not authenticated: {detail}")
    if code in (
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
    ):
        return RaftschedError(detail)
    return RaftschedError(f"`raftsched {command}` failed ({code.name}): {detail}")
