"""`raftsched scheduler` (run one scheduler node) and `raftsched cluster status`.

``scheduler``: migrates the metadata DB (or waits for it), starts the Raft node, the admin
endpoint, the heartbeat thread, the leader loop and the materializer. Logs go to stderr, one
line per event. SIGTERM/SIGINT stop it cleanly and exit 0 (1 if the node hit a fatal error,
e.g. a snapshot from a newer release). ``--address host:port`` picks this node among
``[cluster] nodes`` so one config file serves every node.

``cluster status``: asks every node's admin endpoint (``GET /status``; ``[cluster]
admin_bind``, else Raft port + 100) and prints role, term, indexes, lag, digest and outbox.
Exit 0 when a leader with a quorum answers, 3 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any

from raftsched.cli.output import add_output_flag, emit

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
    "backpressure",
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

    cluster = sub.add_parser("cluster", help="the scheduler cluster: status")
    cluster.set_defaults(handler=lambda _args: _usage(cluster))
    cluster_sub = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    status = cluster_sub.add_parser(
        "status",
        help="role, term, indexes, lag and digest of every node",
        description="Ask every node's admin endpoint for its status. Exit 0 when a leader"
        " with a quorum answers, 3 otherwise.",
    )
    status.add_argument(
        "--nodes",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="Raft addresses to ask (default: [cluster] nodes); admin port = Raft port + 100"
        " unless [cluster] admin_bind is set",
    )
    status.add_argument("--timeout", type=float, default=2.0, help="seconds per node (2)")
    add_output_flag(status)
    status.set_defaults(handler=_cluster_status)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


# -- scheduler ------------------------------------------------------------------------------


def _scheduler(args: argparse.Namespace) -> int:
    from raftsched.cluster.runtime import NodeRuntime, try_migrate
    from raftsched.config import load_config

    config = load_config(args.config)
    _setup_logging(config.core.logging_level)
    log = logging.getLogger("raftsched.scheduler")
    runtime = NodeRuntime.from_config(config, self_address=args.address)
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


def _setup_logging(level: str) -> None:
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s")
    )
    root.addHandler(handler)
    root.setLevel(level)


# -- cluster status ---------------------------------------------------------------------------


def _cluster_status(args: argparse.Namespace) -> int:
    from raftsched.cluster.settings import admin_address_for

    admin_bind = ""
    if args.nodes:
        nodes = [n.strip() for n in args.nodes.split(",") if n.strip()]
    else:
        from raftsched.config import load_config

        cluster = load_config(args.config).cluster
        nodes = list(cluster.nodes)
        # admin_bind names ONE node's endpoint: usable only for a single-node cluster
        admin_bind = cluster.admin_bind if len(nodes) == 1 else ""
    targets = [(node, admin_address_for(node, admin_bind)) for node in nodes]
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        answers = list(pool.map(lambda t: fetch_status(t[1], args.timeout), targets))
    report = build_report(targets, answers)
    rows = [_row(node) for node in report["nodes"]]
    emit(report, output=args.output, rows=rows, columns=STATUS_COLUMNS)
    if args.output != "json":
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
        "backpressure": node.get("backpressure"),
    }
