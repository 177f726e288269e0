"""`raftsched scheduler` (run one scheduler node) and `raftsched cluster ...`.

``scheduler``: migrates the metadata DB (or waits for it), starts the Raft node, the admin
endpoint, the heartbeat thread, the leader loop and the materializer. Logs go to stderr, one
line per event. SIGTERM/SIGINT stop it cleanly and exit 0 (1 if the node hit a fatal error,
e.g. a snapshot from a newer release); a leader first stops scheduling and hands leadership to
the most up-to-date follower, waiting at most ``[cluster] handover_timeout`` (3 s) for it to
lead (``NodeRuntime.stop``), so a planned restart costs no election timeout.
``--address host:port`` picks this node among ``[cluster] nodes`` so one config file serves
every node.

``cluster status``: one gRPC GetStatus (any node answers for every member) printed as role,
term, commit/applied index, lag, digest and outbox of each node. Exit 0 when a leader with a
quorum is seen, 3 otherwise. ``--local-admin`` (or ``--nodes``) asks every node's HTTP admin
endpoint instead (``GET /status``; ``[cluster] admin_bind``, else Raft port + 100), for when
the gRPC API is down.

``cluster transfer-leader [TARGET]``, ``add-node ADDRESS``, ``remove-node ADDRESS``: the
leadership and membership RPCs (role admin). Connection flags and errors: ``connect.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any

from raftsched.addresses import admin_address_for
from raftsched.cli.common import setup_logging, usage
from raftsched.cli.connect import (
    DEFAULT_TIMEOUT,
    add_connection_flags,
    cluster_call,
    connect,
    to_dict,
)
from raftsched.cli.output import emit

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_UNAVAILABLE = 3
STATUS_COLUMNS = (
    "node",
    "pid",
    "role",
    "term",
    "commit",
    "applied",
    "lag",
    "digest",
    "outbox",
    "watermark",
    "quarantined",
    "backpressure",
    "release",
    "cluster_version",
)
GRPC_STATUS_COLUMNS = (
    "node",
    "api_address",
    "role",
    "term",
    "commit",
    "applied",
    "lag",
    "digest",
    "outbox",
    "quarantined",
    "backpressure",
    "release",
    "cluster_version",
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sched = sub.add_parser(
        "scheduler",
        help="run one scheduler node (Raft member, leader loop, materializer)",
        description="Run one scheduler node of the cluster described by [cluster] nodes.",
    )
    sched.add_argument(
        "--address",
        metavar="HOST:PORT",
        help="this node's Raft address, one of [cluster] nodes"
        " (default: [cluster] self_address, env RAFTSCHED__CLUSTER__SELF_ADDRESS)",
    )
    sched.set_defaults(handler=_scheduler)

    cluster = sub.add_parser(
        "cluster", help="the scheduler cluster: status, leadership and membership"
    )
    cluster.set_defaults(handler=lambda _args: usage(cluster))
    cluster_sub = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    status = cluster_sub.add_parser(
        "status",
        help="role, term, indexes, lag, digest and outbox of every node",
        description="Ask the cluster (gRPC GetStatus, any node answers for all) for every"
        " node's status. Exit 0 when a leader with a quorum is seen, 3 otherwise."
        " --local-admin asks each node's HTTP admin endpoint instead, for when gRPC is down.",
    )
    add_connection_flags(
        status,
        timeout_help=f"seconds to wait ({DEFAULT_TIMEOUT:g}; with --local-admin: per node, 2)",
    )
    status.add_argument(
        "--local-admin",
        action="store_true",
        help="ask each node's HTTP admin endpoint (GET /status; Raft port + 100 unless"
        " [cluster] admin_bind) instead of the gRPC API",
    )
    status.add_argument(
        "--nodes",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="with --local-admin (implies it): Raft addresses to ask (default: [cluster] nodes)",
    )
    status.set_defaults(handler=_cluster_status)

    transfer = cluster_sub.add_parser(
        "transfer-leader",
        help="hand leadership to another node (needs role admin)",
        description="Ask the leader to hand leadership to TARGET, or to the most up-to-date"
        " connected follower when TARGET is omitted. Prints the leader after the transfer.",
    )
    transfer.add_argument("target", nargs="?", default="", help="Raft address host:port")
    add_connection_flags(transfer)
    transfer.set_defaults(handler=_transfer_leader)

    for name, verb, handler in (
        ("add-node", "add a node to", _add_node),
        ("remove-node", "remove a node from", _remove_node),
    ):
        change = cluster_sub.add_parser(
            name,
            help=f"{verb} the Raft membership (needs role admin)",
            description=f"{verb.capitalize()} the Raft membership; prints the members after"
            " the change. Start a new node with the new membership before adding it.",
        )
        change.add_argument("address", help="the node's Raft address, host:port")
        add_connection_flags(change)
        change.set_defaults(handler=handler)

    from raftsched.cli import rebuild_cmd

    rebuild_cmd.add_to(cluster_sub)  # cluster rebuild --from-db (DB access, nodes stopped)


# -- scheduler ------------------------------------------------------------------------------


def _scheduler(args: argparse.Namespace) -> int:
    # Before anything imports grpc: a node forks its snapshot writer (cluster/node.py), and
    # gRPC's fork handlers restart gRPC's threads in such a child, which then aborts (23 of 30
    # forks under load, measured); the writer never uses gRPC. Set here, not globally: other
    # processes keep gRPC's default.
    os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"
    from raftsched import taskenv
    from raftsched.cluster.runtime import NodeRuntime, try_migrate
    from raftsched.config import load_config
    from raftsched.logging_setup import register_stack_dump
    from raftsched.raft.compat import check_pysyncobj

    config = load_config(args.config)
    setup_logging(config.core.logging_level, config.core.log_format)
    register_stack_dump()  # kill -USR1: every thread's stack into the node's log
    check_pysyncobj()  # we patch its internals: refuse a release that lacks them, in one line
    taskenv.configure(config.worker.task_env_allowlist)  # what DAG-parse children may see
    taskenv.protect_this_process()  # no task of the same user reads our /proc environ
    log = logging.getLogger("raftsched.scheduler")
    runtime = NodeRuntime.from_config(
        config, self_address=args.address, api_factory=node_api_factory(config)
    )
    try_migrate(runtime.sink)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        runtime.start()
        log.info(
            "node %s running; status at http://%s/status",
            runtime.settings.self_address,
            runtime.settings.admin_address,
        )
        while not stop.wait(0.2):
            if runtime.fatal_error is not None:
                log.critical("stopping: %s", runtime.fatal_error)
                return EXIT_FATAL
        return EXIT_OK
    finally:
        runtime.stop()


# -- cluster status -------------------------------------------------------------------------


def _cluster_status(args: argparse.Namespace) -> int:
    if args.local_admin or args.nodes:
        return _local_admin_status(args)
    from raftsched.api.gen import cluster_pb2

    with connect(args) as client, cluster_call("cluster status"):
        response = client.cluster.GetStatus(cluster_pb2.GetStatusRequest())
    nodes = [to_dict(node) for node in response.nodes]
    leader = next((n["node_id"] for n in nodes if n["role"] == "leader" and n["has_quorum"]), None)
    report = {"nodes": nodes, "leader": leader, "freshness": to_dict(response.freshness)}
    rows = [_grpc_row(node) for node in nodes]
    emit(report, output=args.output, rows=rows, columns=GRPC_STATUS_COLUMNS)
    if args.output != "json":
        for node in nodes:
            if node["error"]:
                print(f"{node['node_id'] or node['address']}: {node['error']}")
        print(f"leader: {leader}" if leader else "leader: none (no quorum)")
    return EXIT_OK if leader else EXIT_UNAVAILABLE


def _grpc_row(node: dict[str, Any]) -> dict[str, Any]:
    name = node["node_id"] or node["address"]
    if node["role"] == "unreachable":  # only its address and the error are known
        return {"node": name, "api_address": node["api_address"] or None, "role": "unreachable"}
    digest = node["digest"]
    return {
        "node": name,
        "api_address": node["api_address"] or None,
        "role": node["role"],
        "term": node["term"],
        "commit": node["commit_index"],
        "applied": node["applied_index"],
        "lag": node["lag"],
        "digest": f"{digest[:12]}@{node['digest_index']}" if digest else None,
        "outbox": node["outbox_backlog"],
        "quarantined": node.get("quarantined"),  # set by the leader only
        "backpressure": node["backpressure"],
        **release_cells(node.get("version"), node.get("release"), node.get("cluster_version")),
    }


def _local_admin_status(args: argparse.Namespace) -> int:
    admin_bind = ""
    if args.nodes:
        nodes = [n.strip() for n in args.nodes.split(",") if n.strip()]
    else:
        from raftsched.config import load_config

        cluster = load_config(args.config).cluster
        nodes = list(cluster.nodes)
        admin_bind = cluster.admin_bind
    targets = [(node, admin_address_for(node, admin_bind)) for node in nodes]
    timeout = args.timeout or 2.0
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        answers = list(pool.map(lambda t: fetch_status(t[1], timeout), targets))
    report = build_report(targets, answers)
    rows = [_row(node) for node in report["nodes"]]
    emit(report, output=args.output, rows=rows, columns=STATUS_COLUMNS)
    if args.output != "json":
        for node in report["nodes"]:
            errors = [node.get(k) for k in ("fatal_error", "apply_error") if node.get(k)]
            if errors:
                print(f"{node.get('node_id') or node['address']}: {'; '.join(errors)}")
        leader = report["leader"]
        print(f"leader: {leader}" if leader else "leader: none (no quorum)")
    return EXIT_OK if report["leader"] else EXIT_UNAVAILABLE


def fetch_status(admin_address: str, timeout: float) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{admin_address}/status", timeout=timeout) as resp:
            return dict(json.load(resp))
    except (OSError, ValueError, urllib.error.URLError):
        return None


def build_report(
    targets: list[tuple[str, str]], answers: list[dict[str, Any] | None]
) -> dict[str, Any]:
    """{"nodes": [...], "leader": address or None}; lag = leader commit - node applied."""
    leader_status = next(
        (a for a in answers if a and a.get("role") == "leader" and a.get("has_quorum")), None
    )
    leader_commit = leader_status.get("commit_index") if leader_status else None
    nodes = []
    for (address, admin), answer in zip(targets, answers, strict=True):
        if answer is None:
            nodes.append({"address": address, "admin_address": admin, "state": "down"})
            continue
        entry = {**answer, "address": address, "admin_address": admin, "state": "up"}
        applied = answer.get("applied_index")
        entry["lag"] = (
            leader_commit - applied if leader_commit is not None and applied is not None else None
        )
        nodes.append(entry)
    return {
        "nodes": nodes,
        "leader": leader_status.get("address") if leader_status else None,
    }


def _row(node: dict[str, Any]) -> dict[str, Any]:
    if node.get("state") == "down":
        return {"node": node["address"], "role": "down"}
    digest = node.get("digest") or ""
    return {
        "node": node.get("node_id") or node["address"],
        "pid": node.get("pid"),
        "role": node.get("role"),
        "term": node.get("term"),
        "commit": node.get("commit_index"),
        "applied": node.get("applied_index"),
        "lag": node.get("lag"),
        "digest": f"{digest[:12]}@{node.get('digest_index')}" if digest else None,
        "outbox": node.get("outbox_size"),
        "watermark": node.get("db_watermark"),
        "quarantined": node.get("quarantined") if node.get("role") == "leader" else None,
        "backpressure": node.get("backpressure"),
        **release_cells(node.get("version"), node.get("release"), node.get("cluster_version")),
    }


def release_cells(version: Any, release: Any, cluster_version: Any) -> dict[str, Any]:
    """A node of 0.1.0 (release 1) reports neither (README, Upgrading)."""
    release_cell = f"{version or '0.1.0'}/r{release or 1}"
    return {"release": release_cell, "cluster_version": cluster_version or 1}


# -- cluster transfer-leader | add-node | remove-node ----------------------------------------


def _transfer_leader(args: argparse.Namespace) -> int:
    from raftsched.api.gen import cluster_pb2

    request = cluster_pb2.TransferLeadershipRequest(target=args.target)
    with connect(args) as client, cluster_call("cluster transfer-leader", role="admin"):
        response = client.cluster.TransferLeadership(request)
    if args.output == "json":
        emit(to_dict(response), output="json")
    else:
        print(f"leader: {response.leader_id or 'unknown'}")
    return EXIT_OK


def _add_node(args: argparse.Namespace) -> int:
    from raftsched.api.gen import cluster_pb2

    request = cluster_pb2.AddNodeRequest(address=args.address)
    with connect(args) as client, cluster_call("cluster add-node", role="admin"):
        response = client.cluster.AddNode(request)
    return _membership(args, response, f"added {args.address}")


def _remove_node(args: argparse.Namespace) -> int:
    from raftsched.api.gen import cluster_pb2

    request = cluster_pb2.RemoveNodeRequest(address=args.address)
    not_found = "{detail}; `raftsched cluster status` lists the members"
    with (
        connect(args) as client,
        cluster_call("cluster remove-node", role="admin", not_found=not_found),
    ):
        response = client.cluster.RemoveNode(request)
    return _membership(args, response, f"removed {args.address}")


def _membership(args: argparse.Namespace, response: Any, done: str) -> int:
    if args.output == "json":
        emit(to_dict(response), output="json")
    else:
        print(f"{done}; members: {', '.join(response.nodes)}")
    return EXIT_OK


def node_api_factory(config: Any) -> Any:
    """The node's raftsched.v1 gRPC API, built by the runtime once its Raft node exists: the
    command wires the API to the node, so ``raftsched.cluster`` never imports ``raftsched.api``."""

    def build(runtime: Any) -> Any:
        from raftsched.api.node_api import NodeApi

        return NodeApi(
            runtime,
            config.api,
            engine=runtime.engine,
            default_lease_ttl=runtime.default_lease_ttl,
        )

    return build
