"""`raftsched cluster rebuild --from-db`: a new cluster epoch from the metadata DB's history.

For when every node's journal is lost, or the leader refuses to go on because the DB and the
log disagree (``cluster status`` says so). With every node stopped, it reads the DB
(``raftsched.store.rebuild``: DAGs, last scheduled slots, active runs and attempts, the
watermark, variables and connections as ciphertext, open callback jobs), builds a
``SchedulerState`` with ``SchedulerState.restore`` (attempts that were running are closed
and retried; tasks whose upstreams are done are queued), and writes it as
the starting snapshot of every node in ``[cluster] nodes`` (or ``--nodes``) under
``[cluster] data_dir``, at a Raft index above every fencing token the old cluster could have
issued. Any Raft files already there are moved to ``pre-rebuild-<time>/`` in the node's
directory, never deleted. Then start the nodes. On several machines, run it on each with
``--nodes`` naming that machine's nodes (the DB gives each the same state; or copy one
node's directory).

Refuses (exit 1) while a node answers on its admin endpoint, or when the DB schema is not
current.
"""

from __future__ import annotations

import argparse
import json
import shutil
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from raftsched.addresses import admin_address_for
from raftsched.cli.common import setup_logging

EXIT_OK = 0
EXIT_REFUSED = 1
RAFT_FILES = ("raft.journal", "raft.journal.meta", "raft.dump", "raft.dump.tmp")


def add_to(cluster_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    rebuild = cluster_sub.add_parser(
        "rebuild",
        help="write every node's starting state from the metadata DB (all nodes stopped)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    rebuild.add_argument(
        "--from-db",
        action="store_true",
        required=True,
        help="the DB's history becomes the cluster's state (the only source for now)",
    )
    rebuild.add_argument(
        "--nodes",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="write only these nodes' directories (default: every node in [cluster] nodes)",
    )
    rebuild.add_argument(
        "--skip-running-check",
        action="store_true",
        help="do not ask the nodes' admin endpoints whether they still run",
    )
    rebuild.set_defaults(handler=_rebuild)


def _running(nodes: list[str], admin_bind: str) -> list[str]:
    up = []
    for node in nodes:
        url = f"http://{admin_address_for(node, admin_bind)}/status"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as response:
                json.loads(response.read())
            up.append(node)
        except (OSError, ValueError, urllib.error.URLError):
            continue
    return up


def build(config: Any, *, now: datetime | None = None) -> tuple[dict[str, Any], Any]:
    """(the starting state's snapshot dict, the RebuildPlan) from the config's DB."""
    from raftsched.core.state import SchedulerState
    from raftsched.store.engine import create_engine_for
    from raftsched.store.migrate import schema_status
    from raftsched.store.rebuild import build_state

    now = now or datetime.now(UTC)
    engine = create_engine_for(config.database.url, connect_timeout=config.database.connect_timeout)
    try:
        status = schema_status(engine)
        if not status.at_head:
            raise SystemExit(
                f"the metadata DB schema is at {status.current}, not {status.head}: run"
                " `raftsched db migrate` first"
            )
        plan = build_state(engine, now=now, run_retention_sec=config.scheduler.run_retention_sec)
    finally:
        engine.dispose()
    state = SchedulerState.restore(plan.state)
    _settle(state, now, plan.counts)
    data = state.snapshot()
    data["applied_index"] = plan.base_index
    SchedulerState.restore(data)  # what the nodes will read must load
    return data, plan


def _settle(state: Any, now: datetime, counts: dict[str, int]) -> None:
    """Queue what the DB says is ready and finish runs whose tasks all finished: the rows
    that did so may have been past the watermark when the journals were lost. Uses the
    core's own transition rules (so the result is what apply would have made)."""
    try:
        counts["rows_settled"] = state.settle_live_runs(now)
    except Exception as err:  # the core changed shape: the leader settles as tasks finish
        print(f"warning: could not settle restored runs ({err}); continuing")


def _rebuild(args: argparse.Namespace) -> int:
    from raftsched.config import load_config
    from raftsched.raft.settings import node_dir
    from raftsched.raft.snapshots import write_starting_point

    config = load_config(args.config)
    setup_logging(config.core.logging_level, config.core.log_format)
    cluster = config.cluster
    nodes = list(cluster.nodes)
    chosen = [n.strip() for n in args.nodes.split(",") if n.strip()] if args.nodes else nodes
    unknown = [n for n in chosen if n not in nodes]
    if unknown:
        print(f"not in [cluster] nodes: {', '.join(unknown)}")
        return EXIT_REFUSED
    if not args.skip_running_check:
        up = _running(nodes, cluster.admin_bind)
        if up:
            print(
                f"refusing: node(s) {', '.join(up)} still running; stop every node, then run"
                " this again"
            )
            return EXIT_REFUSED
    now = datetime.now(UTC)
    try:
        state, plan = build(config, now=now)
    except SystemExit as err:
        print(f"refusing: {err}")
        return EXIT_REFUSED
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    durable = bool(getattr(cluster, "durable_journal", True))
    for node in chosen:
        directory = node_dir(Path(cluster.data_dir), node)
        moved = _move_aside(directory, f"pre-rebuild-{stamp}")
        write_starting_point(directory, nodes, state, plan.base_index, durable=durable)
        extra = f" (old files in {moved})" if moved else ""
        print(f"{node}: starting snapshot written to {directory}{extra}")
    counts = ", ".join(f"{k}={v}" for k, v in sorted(plan.counts.items()))
    print(
        f"new cluster epoch: log index {plan.base_index} (fencing tokens from before are all"
        f" lower); outbox continues after DB watermark {plan.watermark}; {counts}"
    )
    print("start every node now")
    return EXIT_OK


def _move_aside(directory: Path, name: str) -> Path | None:
    present = [directory / f for f in RAFT_FILES if (directory / f).exists()]
    present += sorted(directory.glob("raft.journal*"))
    present = sorted(set(present))
    if not present:
        return None
    target = directory / name
    target.mkdir(parents=True, exist_ok=True)
    for path in present:
        shutil.move(str(path), str(target / path.name))
    return target
