"""The partition suite's entry point (``scripts/partition/run``).

    scripts/partition/run --profile short --seed 7 --duration 60 --report report.json
    scripts/partition/run --seed 7 --dry-run          # print the fault schedule only
    scripts/partition/run --cleanup 1a2b3c            # remove what a crashed run left

A run: N namespaces on a private bridge (``netns``), a private PostgreSQL on the bridge
address (SQLite when PostgreSQL cannot run), N real ``raftsched scheduler`` nodes inside the
namespaces, a workload of second-granular DAGs with catch-up whose end_date closes the fault
window, the seeded fault schedule (``schedule`` + ``nemesis``), a settle phase, then the
checker over the DB and the nodes' statuses, a verdict per invariant and a JSON report.

Not wired yet (no workers exist in the tree at the time of writing): the workload runs no task
attempts, so invariants 2 and 3 are checked over zero attempts; when workers exist, start
them in the root namespace against the nodes' gRPC addresses and pass their execution
records to ``load_history(executions=...)``.

Exit: 0 all invariants hold, 1 a violation, 2 usage / environment (not root, no netns),
3 the cluster never came up (no leader), 130 interrupted (SIGINT/SIGTERM: everything the
run made is removed first). A cluster that never settles fails (1), saying so.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scripts.partition import checker, netns, report, schedule
from scripts.partition.nemesis import Timeline, availability, execute

EXIT_USAGE = 2
EXIT_NO_CLUSTER = 3
EXIT_INTERRUPTED = 130
DEFAULT_DURATION = {"short": 60.0, "long": 600.0}
SETTLE_TIMEOUT = 120.0
LEADER_TIMEOUT = 90.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/partition/run",
        description="Run raftsched scheduler nodes in network namespaces under a seeded"
        " schedule of faults, then prove the invariants of DESIGN.md section 4.",
    )
    parser.add_argument("--profile", choices=sorted(schedule.PROFILES), default="short")
    parser.add_argument("--seed", type=int, help="schedule seed (default: random, printed)")
    parser.add_argument(
        "--duration", type=float, help="seconds of faults (default: short 60, long 600)"
    )
    parser.add_argument("--nodes", type=int, default=3, help="scheduler nodes (3)")
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    parser.add_argument("--dry-run", action="store_true", help="print the schedule and exit")
    parser.add_argument("--workdir", type=Path, help="keep node logs and data here")
    parser.add_argument("--cleanup", metavar="RUNID", help="remove a crashed run's leftovers")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
    if args.duration is None:
        args.duration = DEFAULT_DURATION[args.profile]
    if args.duration <= 0 or not 3 <= args.nodes <= 9:
        parser.error("--duration must be > 0 and --nodes 3..9")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cleanup:
        netns.require_root()
        found = netns.cleanup_run(args.cleanup)
        print(f"removed: {found}" if found else f"nothing left of run {args.cleanup}")
        return 0
    steps = schedule.make_schedule(
        seed=args.seed, duration=args.duration, profile=args.profile, nodes=args.nodes
    )
    print(f"seed {args.seed}, profile {args.profile}, duration {args.duration:g}s")
    print(schedule.describe(steps))
    if args.dry_run:
        return 0
    reason = netns.unavailable_reason()
    if reason is not None:
        print(f"cannot run the partition suite here: {reason}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return run(args, steps)
    except KeyboardInterrupt:
        print("interrupted: nodes stopped, namespaces and bridge removed", file=sys.stderr)
        return EXIT_INTERRUPTED


def workload(start: datetime, end: datetime) -> dict[str, str]:
    """DAG files: 1-second and 5-second cron DAGs with catch-up over [start, end]."""

    def dag(dag_id: str, cron: str) -> str:
        return textwrap.dedent(
            f"""\
            from datetime import datetime

            from raftsched import DAG, BashTask

            with DAG(
                {dag_id!r},
                schedule={cron!r},
                start_date=datetime.fromisoformat({start.isoformat()!r}),
                end_date=datetime.fromisoformat({end.isoformat()!r}),
                catchup=True,
                max_active_runs=1000000,
            ) as dag:
                BashTask("noop", command="true")
            """
        )

    return {
        "pt_every_second.py": dag("pt_every_second", "* * * * * *"),
        "pt_every_5s.py": dag("pt_every_5s", "* * * * * */5"),
    }


def run(args: argparse.Namespace, steps: list[schedule.Step]) -> int:
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    from scripts.partition.cluster import NetnsCluster, Observer
    from scripts.partition.pgserver import PostgresServer
    from scripts.partition.pgserver import unavailable_reason as pg_unavailable

    started_at = datetime.now(UTC)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="raftsched-partition-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env: dict[str, Any] = {"nodes": args.nodes, "workdir": str(workdir)}
    db = None
    cluster = None
    observer = None
    timeline = Timeline()
    with netns.Hosts(args.nodes) as hosts:
        env.update(run_id=hosts.run_id, subnet=str(hosts.subnet))
        print(f"run {hosts.run_id}: namespaces on {hosts.subnet}, workdir {workdir}")
        try:
            if pg_unavailable() is None:
                db = PostgresServer(hosts.gateway, str(hosts.subnet))
                db.start()
                db_url = db.create_database()
            else:
                env["db_note"] = f"SQLite: {pg_unavailable()}"
                db_url = f"sqlite:///{workdir / 'metadata.db'}"
            env["db_url"] = db_url
            first = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
            end = first + timedelta(seconds=args.duration)
            cluster = NetnsCluster(hosts, workdir, dags=workload(first, end), db=db, db_url=db_url)
            env["nemeses"] = availability(cluster)
            cluster.start()
            if not _wait(lambda: cluster.leader() is not None, LEADER_TIMEOUT):
                return _no_cluster(args, cluster, timeline, env, started_at, "no leader elected")
            timeline = Timeline()
            observer = Observer(cluster, time.monotonic())
            observer.start()
            execute(steps, cluster, timeline)
            _wait(lambda: datetime.now(UTC) > end + timedelta(seconds=2), args.duration + 30)
            timeline.log("settle", "begin")
            settled = _wait(lambda: _settled(cluster), SETTLE_TIMEOUT)
            timeline.log("settle", "end", settled=settled)
            observer.stop()
            raw = cluster.statuses()
            statuses = [checker.NodeStatus.from_json(cluster.names[i], s) for i, s in raw.items()]
            engine = sa.create_engine(db_url, poolclass=NullPool)
            try:
                history = checker.load_history(
                    engine,
                    statuses=statuses,
                    due_until=end,
                    digest_samples=sorted(observer.digests, key=lambda d: d.digest_index),
                )
            finally:
                engine.dispose()
            verdicts = checker.check(history)
            print(checker.format_verdicts(verdicts))
            env["settled"] = settled
            data = report.build(
                verdicts,
                seed=args.seed,
                profile=args.profile,
                timeline=timeline.events,
                leader_changes=observer.leader_changes,
                counts={
                    "dags": len(history.dags),
                    "runs": len(history.runs),
                    "attempts": len(history.attempts),
                    "faults": sum(1 for e in timeline.events if e["action"] == "start"),
                    "status_polls": observer.polls,
                    "digests_sampled": len(observer.digests),
                },
                environment=env,
                started_at=started_at,
            )
            _finish(args, data, workdir)
            if not settled:
                print("the cluster never settled: see the node logs", file=sys.stderr)
            return report.exit_code(data) if settled else max(report.exit_code(data), 1)
        finally:
            if observer is not None:
                observer.stop()
            if cluster is not None:
                cluster.close()
            if db is not None:
                db.cleanup()
            if args.workdir is None and not args.report:
                shutil.rmtree(workdir, ignore_errors=True)


def _settled(cluster: Any) -> bool:
    """A leader, every node answering at the same applied index, the outbox all in the DB."""
    statuses = cluster.statuses()
    leader = cluster.leader(statuses)
    if leader is None or not all(statuses.values()):
        return False
    applied = {s["applied_index"] for s in statuses.values()}
    lead = statuses[leader]
    return (
        len(applied) == 1
        and lead["db_watermark"] is not None
        and lead["db_watermark"] == lead["outbox_last_seq"] == lead["outbox_acked_seq"]
    )


def _wait(check: Any, timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return bool(check())


def _no_cluster(
    args: argparse.Namespace,
    cluster: Any,
    timeline: Timeline,
    env: dict[str, Any],
    started_at: datetime,
    why: str,
) -> int:
    env["error"] = why
    env["log_tails"] = {name: cluster.log_tail(i) for i, name in enumerate(cluster.names)}
    data = report.build([], seed=args.seed, profile=args.profile, environment=env)
    data["verdict"] = "ERROR"
    _finish(args, data, cluster.workdir)
    print(f"{why}; node logs in {cluster.log_dir}", file=sys.stderr)
    for i in range(len(cluster.names)):
        print(f"--- node {i}\n{cluster.log_tail(i)}", file=sys.stderr)
    return EXIT_NO_CLUSTER


def _finish(args: argparse.Namespace, data: dict[str, Any], workdir: Path) -> None:
    if args.report:
        report.write(data, args.report)
        print(f"report: {args.report}")
    else:
        print(json.dumps({k: data[k] for k in ("verdict", "seed", "counts")}, default=str))
    if data["verdict"] != "ERROR":
        print(report.summary(data))


if __name__ == "__main__":
    sys.exit(main())
