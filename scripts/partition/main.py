"""The partition suite's entry point (``scripts/partition/run``). Needs root (namespaces,
iptables); ``--dry-run`` does not.

    scripts/partition/run --profile short --seed 1 --duration 90 --report report.json
    scripts/partition/run --seed 7 --dry-run          # print the fault schedule only
    scripts/partition/run --cleanup 1a2b3c            # remove what a crashed run left

A run: N namespaces on a private bridge (``netns``), a private PostgreSQL on the bridge
address (SQLite when PostgreSQL cannot run), N real ``raftsched scheduler`` nodes inside the
namespaces, waiting until each serves gRPC (health SERVING), then the workload
(``workload``): three DAGs of 1-, 2- and 5-second schedules with catch-up whose end_date
closes the fault window, tasks of 0-3 s, one failing once and retried, one failing every try
(its runs end failed), one that defers on a time trigger (``triggers.py``), and assets
(``assets.py``: a producer with outlets, an AssetAll and an AssetAny consumer, events posted
with client ids and sent again after errors), run by 2
``raftsched worker`` and 2 ``raftsched triggerer`` processes in the root namespace against
every node's gRPC address; each task records its real execution (start, end, try, pid) to
its worker's JSONL file. Then the seeded fault schedule (``schedule`` + ``nemesis``:
partitions, packet loss, kill -9 and SIGSTOP of nodes, DB restarts, kill -9 of a worker), a
drain (the workers finish the due runs: bounded), the workers paused, a settle (every node at
the same applied index, the outbox all in the DB), and the checker over the DB rows, the
nodes' statuses and the executions: a verdict per invariant and a JSON report.

The short profile (CI: ``tests/chaos/test_partition_short.py``, seed 1, 90 s of faults, about
2 minutes in all) and the long one, for a soak before a release::

    sudo scripts/partition/run --profile long --duration 1800 --report long.json \
        --workdir /tmp/partition-long        # keep node/worker logs and executions

The long profile holds each fault 5-30 s (short: 3-8 s) and settles 8-15 s between faults:
leases expire mid-partition and catch-up backlogs build. Allow ~40 minutes with setup and
drain; the seed is printed first (``--seed`` repeats a schedule: the same faults at the same
times, on any machine).

Reading the report: the last lines printed are one ``PASS``/``FAIL`` line per invariant with
how many things it checked (``note:`` lines add context, such as ``408 leased attempts, 408
worker executions``), then a summary: seed, faults, leader changes and the counts (runs,
finished and failed runs, leased attempts, executions, worker kills). ``--report FILE``
writes the JSON (``report.py`` documents it): ``verdict``; ``invariants[]`` with
``checked``, ``notes`` and ``violations``; a flat ``violations[]`` (each with its invariant,
kind, a readable ``detail`` and the rows involved in ``data``); ``timeline[]`` of every
fault's start and heal (what it hit: nodes, sides, pids) plus the drain and settle phases;
``leader_changes[]`` as the observer saw them; ``environment`` (run id, subnet, DB, which
nemeses were unavailable here and why, the drain's outcome). To investigate a violation,
line its ``data`` timestamps up with ``timeline``/``leader_changes``, then read
``<workdir>/logs/node-<i>.log`` (faults are marked in them with ``--- partition:`` lines),
``logs/worker-<i>.log`` and ``executions/<worker>.jsonl``.

Invariants 2 and 3 FAIL as VACUOUS when no attempt was leased or no execution recorded (a
check over nothing proves nothing); a 6th verdict (liveness) FAILs a due run that is neither
finished nor legitimately still running (STUCK). A 7th judges one client session that read
through every node in rotation during the faults (``sessions.py``): no answer older than one
it saw before, no NOT_FOUND for a DAG it had seen (README "Consistency"). An 8th
(``triggers.py``): every committed trigger firing resumed its task exactly once; a 9th
(``assets.py``): every asset event carried by exactly one run of each DAG whose schedule it
meets, one event per client event id however often it was sent (VACUOUS when none was).

Exit: 0 all invariants hold, 1 a violation, 2 usage / environment (not root, no netns),
3 the cluster never came up (no leader, or no gRPC), 130 interrupted (SIGINT/SIGTERM:
everything the run made is removed first). A cluster that never settles fails (1), saying so.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scripts.partition import (
    assets,
    checker,
    evidence,
    faults,
    nemesis,
    netns,
    report,
    schedule,
    sessions,
    triggers,
    workload,
)
from scripts.partition.history import NodeStatus, load_executions, load_history
from scripts.partition.nemesis import Timeline, availability, execute

EXIT_USAGE = 2
EXIT_NO_CLUSTER = 3
EXIT_INTERRUPTED = 130
DEFAULT_DURATION = {"short": 60.0, "long": 600.0}
SETTLE_TIMEOUT = 120.0
LEADER_TIMEOUT = 90.0
GRPC_TIMEOUT = 60.0
DRAIN_TIMEOUT = {"short": 45.0, "long": 300.0}
RELEASE_TIMEOUT = 60.0  # until the cluster version accepts assets
STALL_SECONDS = 20.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/partition/run",
        description="Run raftsched scheduler nodes in network namespaces under a seeded"
        " schedule of faults, then prove the invariants of docs/architecture.md §4.",
    )
    parser.add_argument("--profile", choices=sorted(schedule.PROFILES), default="short")
    parser.add_argument("--seed", type=int, help="schedule seed (default: random, printed)")
    parser.add_argument(
        "--duration", type=float, help="seconds of faults (default: short 60, long 600)"
    )
    parser.add_argument("--nodes", type=int, default=3, help="scheduler nodes (3)")
    parser.add_argument("--workers", type=int, default=2, help="raftsched workers (2)")
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    parser.add_argument("--dry-run", action="store_true", help="print the schedule and exit")
    parser.add_argument("--workdir", type=Path, help="keep node logs and data here")
    parser.add_argument("--cleanup", metavar="RUNID", help="remove a crashed run's leftovers")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
    if args.duration is None:
        args.duration = DEFAULT_DURATION[args.profile]
    if args.duration <= 0 or not 3 <= args.nodes <= 9 or not 1 <= args.workers <= 8:
        parser.error("--duration must be > 0, --nodes 3..9 and --workers 1..8")
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


def run(args: argparse.Namespace, steps: list[schedule.Step]) -> int:
    from scripts.partition.cluster import NetnsCluster, Observer
    from scripts.partition.pgserver import PostgresServer
    from scripts.partition.pgserver import unavailable_reason as pg_unavailable

    started_at = datetime.now(UTC)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="raftsched-partition-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env: dict[str, Any] = {"nodes": args.nodes, "workers": args.workers, "workdir": str(workdir)}
    db = None
    cluster = None
    observer = None
    session = None
    workers = None
    triggerers = None
    poster = None
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
            cluster = NetnsCluster(
                hosts,
                workdir,
                dags={},
                db=db,
                db_url=db_url,
                api_tokens={
                    "worker_tokens": workload.WORKER_TOKEN,
                    "admin_tokens": workload.ADMIN_TOKEN,
                },
            )
            cluster.start()
            if not _wait(lambda: cluster.leader() is not None, LEADER_TIMEOUT):
                return _no_cluster(args, cluster, env, "no leader elected")
            if not _wait(lambda: _grpc_down(cluster) is None, GRPC_TIMEOUT, interval=1.0):
                why = f"the nodes do not serve gRPC: {_grpc_down(cluster)}"
                return _no_cluster(args, cluster, env, why)
            workers = workload.Workers(workdir, cluster.api_addresses, count=args.workers)
            cluster.workers = workers
            triggerers = triggers.Triggerers(
                workdir, cluster.api_addresses, workers.config_path, workload.WORKER_TOKEN
            )
            cluster.triggerers = triggerers
            env["assets_accepted"] = assets.wait_release(cluster, RELEASE_TIMEOUT)
            env["nemeses"] = availability(cluster)
            env["worker_settings"] = {
                "count": args.workers,
                "concurrency": workload.CONCURRENCY,
                "lease_ttl": workload.LEASE_TTL,
                "heartbeat_interval": workload.HEARTBEAT_INTERVAL,
            }
            script = workdir / "pt_task.sh"
            script.write_text(workload.TASK_SCRIPT)
            first = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
            end = first + timedelta(seconds=args.duration)
            env["window"] = {"first": first.isoformat(), "end": end.isoformat()}
            deferred = {f"{triggers.DAG_ID}.py": triggers.dag_file(first, end, script)}
            deferred.update(assets.dag_files(first, end, script))
            cluster.write_dags({**workload.dag_files(first, end, script), **deferred})
            workers.start()
            triggerers.start()
            timeline = Timeline()
            observer = Observer(cluster, time.monotonic())
            observer.start()
            session = sessions.SessionClient(cluster.api_addresses, workload.ADMIN_TOKEN)
            session.start()
            poster = assets.Poster(cluster.api_addresses, workload.ADMIN_TOKEN, hosts.run_id)
            poster.start()
            execute(steps, cluster, timeline)
            _wait(lambda: datetime.now(UTC) > end + timedelta(seconds=2), args.duration + 30)
            poster.stop()  # before the drain: every event id is answered or given up by now
            timeline.log("drain", "begin")
            drained = _drain(db_url, end, timeout=DRAIN_TIMEOUT[args.profile])
            timeline.log("drain", "end", **drained)
            workers.pause()  # no lease, outcome or heartbeat from here on: the rows hold still
            triggerers.pause()  # nor a firing
            timeline.log("settle", "begin")
            settled = _wait(lambda: _settled(cluster), SETTLE_TIMEOUT)
            timeline.log("settle", "end", settled=settled)
            observer.stop()
            raw = cluster.statuses()
            statuses = [NodeStatus.from_json(cluster.names[i], s) for i, s in raw.items()]
            # before the rows: see _read
            executions = load_executions(workers.exec_logs, workers.deaths)
            history, asset_rows = _read(db_url, statuses, end, executions, observer, poster)
            resumes = triggers.load_resumes(workers.exec_logs)
            asset_rows.seen = assets.load_seen(workers.exec_logs)
            workers.close()
            triggerers.close()
            session.stop()
            skew = timedelta(seconds=faults.max_skew(timeline.events))  # clock-skew nemesis
            verdicts = [
                *checker.check(history, skew=skew),
                sessions.check_client_sessions(session.ops),
                nemesis.check_hostile_refusals(timeline.events),  # poison: no INTERNAL answer
                triggers.check_firings_consumed_once(
                    history.attempts, history.runs, history.executions, resumes
                ),
                assets.check_assets_consumed_once(
                    history.dags, history.runs, history.attempts, asset_rows, paused=history.paused
                ),
            ]
            print(checker.format_verdicts(verdicts))
            env.update(settled=settled, drained=drained)
            data = report.build(
                verdicts,
                seed=args.seed,
                profile=args.profile,
                timeline=timeline.events,
                leader_changes=observer.leader_changes,
                counts={
                    **_counts(history, timeline, observer, workers),
                    "triggerer_kills": triggerers.kills,
                    "resumes": len(resumes),
                    "asset_events": len(asset_rows.events),
                    "asset_posts": len(poster.posts),
                },
                environment=env,
                started_at=started_at,
            )
            _finish(args, data, workdir)
            if not settled:  # behind nodes and their tracebacks first (evidence.py)
                print(evidence.unsettled_evidence(cluster, raw), file=sys.stderr)
            return report.exit_code(data) if settled else max(report.exit_code(data), 1)
        finally:
            if observer is not None:
                observer.stop()
            if session is not None:
                session.stop()
            if poster is not None:
                poster.stop()
            if workers is not None:
                workers.close()
            if triggerers is not None:
                triggerers.close()
            if cluster is not None:
                cluster.close()
            if db is not None:
                db.cleanup()
            if args.workdir is None and not args.report:
                shutil.rmtree(workdir, ignore_errors=True)


def _grpc_down(cluster: Any) -> str | None:
    """None when every node's gRPC health check says SERVING, else the first complaint."""
    for i, name in enumerate(cluster.names):
        why = cluster.grpc_serving(i)
        if why is not None:
            return f"{cluster.api_addresses[i]} ({name}): {why}"
    return None


def _engine(db_url: str) -> Any:
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    return sa.create_engine(db_url, poolclass=NullPool)


def _drain(db_url: str, end: datetime, *, timeout: float) -> dict[str, Any]:
    """Let the workers finish the due runs: until every due slot has a finished run, the
    count of unfinished runs has not moved for ``STALL_SECONDS``, or ``timeout``."""
    started = time.monotonic()
    last: tuple[int, int] | None = None
    moved = time.monotonic()
    progress = {"due": 0, "runs": 0, "unfinished": 0}
    engine = _engine(db_url)
    try:
        while time.monotonic() - started < timeout:
            try:
                progress = _due_progress(engine, end)
            except Exception as err:  # the DB may be restarting: try again
                progress["error"] = str(err).splitlines()[0]
            else:
                if progress["runs"] >= progress["due"] and progress["unfinished"] == 0:
                    break
                now = (progress["runs"], progress["unfinished"])
                if now != last:
                    last, moved = now, time.monotonic()
                elif time.monotonic() - moved > STALL_SECONDS:
                    progress["stalled"] = True
                    break
            time.sleep(1.0)
    finally:
        engine.dispose()
    return {**progress, "seconds": round(time.monotonic() - started, 1)}


def _due_progress(engine: Any, end: datetime) -> dict[str, Any]:
    import sqlalchemy as sa

    from raftsched.core.model import DagSpec, ScheduleKind
    from raftsched.core.timetable import timetable_for
    from raftsched.store import tables as t

    with engine.connect() as conn:
        specs = [DagSpec.from_dict(row.spec) for row in conn.execute(sa.select(t.dags.c.spec))]
        dr = t.dag_run.c
        scheduled = sa.and_(dr.run_type == "scheduled", dr.logical_date <= end)
        runs = conn.execute(sa.select(sa.func.count()).where(scheduled)).scalar_one()
        unfinished = conn.execute(
            sa.select(sa.func.count()).where(scheduled, dr.state.not_in(["success", "failed"]))
        ).scalar_one()
    due = 0
    for spec in specs:
        if spec.schedule.kind is ScheduleKind.NONE or not spec.catchup:
            continue
        slots = timetable_for(spec).slots_between(None, end, checker.MAX_SLOTS_PER_DAG)
        due += sum(1 for s in slots if s.logical_date <= end)
    return {"due": due, "runs": int(runs), "unfinished": int(unfinished)}


def _read(
    db_url: str,
    statuses: list[NodeStatus],
    end: datetime,
    executions: list[Any],
    observer: Any,
    poster: Any,
) -> tuple[Any, assets.AssetHistory]:
    """The history, and the asset rows (invariant 9). Executions are read first: each began
    after its lease was committed, and the cluster has settled since, so its attempt row is
    in the DB by now."""
    engine = _engine(db_url)
    try:
        history = load_history(
            engine,
            statuses=statuses,
            due_until=end,
            executions=executions,
            digest_samples=sorted(observer.digests, key=lambda d: d.digest_index),
            expect_executions=True,
        )
        return history, assets.load_asset_history(engine, poster.posts)
    finally:
        engine.dispose()


def _counts(history: Any, timeline: Timeline, observer: Any, workers: Any) -> dict[str, Any]:
    leased = [a for a in history.attempts if a.leased]
    return {
        "dags": len(history.dags),
        "runs": len(history.runs),
        "runs_finished": sum(1 for r in history.runs if r.state in ("success", "failed")),
        "runs_failed": sum(1 for r in history.runs if r.state == "failed"),
        "attempts": len(leased),
        "attempts_failed": sum(1 for a in leased if a.state == "failed"),
        "task_rows": len(history.attempts),
        "executions": len(history.executions),
        "executions_killed": sum(
            1 for e in history.executions if e.ended_at is not None and e.exit_code is None
        ),
        "worker_kills": workers.kills,
        "faults": sum(1 for e in timeline.events if e["action"] == "start"),
        "status_polls": observer.polls,
        "digests_sampled": len(observer.digests),
    }


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


def _no_cluster(args: argparse.Namespace, cluster: Any, env: dict[str, Any], why: str) -> int:
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
