#!/usr/bin/env python
"""Throughput: scheduling decisions committed and materialized per second, 3 nodes.

Registers many DAGs with a 1-second schedule, catch-up on, a start date in the past and an end
date of "now", so the leader has a known backlog of runs to create (DAGS x BACKLOG runs). Then
samples the leader's /status and the DB twice a second: Raft commit index, outbox entries
(``outbox_last_seq``), DB watermark and rows in ``dag_run``, until every run is in the DB or
the time limit passes. Once on SQLite and once on PostgreSQL (a database of its own, created
and dropped; the server from $RAFTSCHED_TEST_PG_URL, default 127.0.0.1:5432/test).

    .venv/bin/python scripts/bench/throughput.py --dags 20 --backlog 600 --limit 120

Also prints the CPU seconds each node used while runs arrived (leader, followers) and the
load average, since the machine is shared.

``--burst N`` measures another shape instead (issue #11): N DAGs with the same cron
(``* * * * *``, one no-op task each) whose first slot is the same minute, leased by
``--workers`` ``raftsched worker --noop`` processes; prints the time from the slot until every
task was leased, and the schedule lag (slot -> lease arrival on a worker) percentiles.

    .venv/bin/python scripts/bench/throughput.py --burst 10000 --backend postgres --lead 300

No asserts: prints figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

from harness import ClusterHarness, second_dags, utcnow, wait_for, whole_second

TICK = os.sysconf("SC_CLK_TCK")

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dags", type=int, default=20)
    parser.add_argument("--backlog", type=int, default=600, help="seconds of missed slots")
    parser.add_argument("--limit", type=float, default=120, help="max seconds per backend")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--keep", action="store_true", help="keep work dirs (node logs)")
    parser.add_argument("--burst", type=int, default=0, help="N DAGs due the same minute")
    parser.add_argument("--workers", type=int, default=4, help="--burst: noop workers")
    parser.add_argument("--concurrency", type=int, default=250, help="--burst: per worker")
    parser.add_argument(
        "--lead",
        type=float,
        default=0.0,
        help="--burst: seconds from start to the slot, to parse and register every DAG"
        " (default 30 + N/100; give more on a busy machine)",
    )
    args = parser.parse_args()
    if args.burst:
        return burst_main(args)

    results = []
    if args.backend in ("sqlite", "both"):
        workdir = Path(tempfile.mkdtemp(prefix="raftsched-bench-tp-"))
        try:
            url = f"sqlite:///{workdir / 'raftsched.db'}"
            results.append(("sqlite", run_one(workdir, url, args)))
        finally:
            _cleanup(workdir, args.keep)
    if args.backend in ("postgres", "both"):
        admin_url = os.environ.get("RAFTSCHED_TEST_PG_URL") or DEFAULT_PG
        name = f"raftsched_bench_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        workdir = Path(tempfile.mkdtemp(prefix="raftsched-bench-tp-"))
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
            results.append(("postgresql", run_one(workdir, url, args)))
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.dispose()
            _cleanup(workdir, args.keep)

    print(f"\n{args.dags} DAGs x {args.backlog} s backlog, 3 nodes on loopback")
    print(
        f"{'backend':<11} {'runs':>7} {'secs':>6} {'mat. runs/s':>12} {'peak/s':>8}"
        f" {'outbox/s':>9} {'raft idx/s':>11} {'cpu leader':>11} {'cpu foll.':>10}"
        f" {'loadavg':>8}"
    )
    for backend, r in results:
        print(
            f"{backend:<11} {r['runs']:>7} {r['seconds']:>6.1f} {r['runs_per_s']:>12.0f}"
            f" {r['peak_runs_per_s']:>8.0f} {r['outbox_per_s']:>9.0f} {r['raft_per_s']:>11.1f}"
            f" {r.get('cpu_leader', 0):>10.1f}s {r.get('cpu_followers', 0):>9.1f}s"
            f" {r.get('load', 0):>8.2f}"
        )
    print(
        "cpu: seconds each kind of node used from the first run in the DB to the last"
        " sample (followers summed); loadavg: 1-minute load at the end (2 cores)"
    )
    print(f"\n{'backend':<11} {'node ms/run':>12} {'pg ms/run':>10} {'2-core ceiling':>15}")
    for backend, r in results:
        total = r.get("node_ms_per_run", 0) + r.get("pg_ms_per_run", 0)
        ceiling = f"{2000 / total:,.0f} runs/s" if total else "-"
        print(
            f"{backend:<11} {r.get('node_ms_per_run', 0):>12.3f}"
            f" {r.get('pg_ms_per_run', 0):>10.3f} {ceiling:>15}"
        )
    print(
        "ms/run: CPU of the three nodes (and of the PostgreSQL backends of the bench's database)"
        " per run that reached the DB; ceiling: 2 idle cores / that, whatever the load now"
    )
    return 0


def _cleanup(workdir: Path, keep: bool) -> None:
    if keep:
        print(f"kept {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def run_one(workdir: Path, db_url: str, args: argparse.Namespace) -> dict[str, float]:
    end = whole_second(utcnow())
    start = end - timedelta(seconds=args.backlog - 1)
    expected = args.dags * args.backlog
    dags = second_dags(args.dags, start=start, end=end, prefix="tp")
    config = {"scheduler": {"min_file_process_interval": 30}}
    with ClusterHarness(workdir, db_url, dags=dags, config=config) as cluster:
        cluster.start()
        leader = cluster.wait_leader(timeout=90)
        count = sa.select(sa.func.count()).select_from(sa.table("dag_run"))
        samples: list[tuple[float, int, int, int]] = []  # t, runs in DB, outbox seq, commit idx
        began = time.monotonic()
        first_run_at: float | None = None
        first_runs = 0
        cpu_start: dict[int, float] = {}
        pg_start: dict[int, float] = {}
        while time.monotonic() - began < args.limit:
            now = time.monotonic()
            try:
                with cluster.engine.connect() as conn:
                    runs = int(conn.execute(count).scalar_one())
            except sa.exc.DBAPIError:
                runs = 0
            status = cluster.status(leader) or {}
            if status.get("role") != "leader":
                found = cluster.leader()
                leader = leader if found is None else found
            samples.append(
                (now, runs, int(status.get("outbox_last_seq") or 0), status.get("commit_index", 0))
            )
            if runs and first_run_at is None:
                first_run_at, first_runs = now, runs
                cpu_start = _cpu(cluster)
                pg_start = _pg_cpu(cluster.engine)
            print(
                f"  t={now - began:6.1f}s runs={runs:7d} outbox_seq={samples[-1][2]:8d}"
                f" commit={samples[-1][3]:7d} watermark={status.get('db_watermark')}"
                f" backpressure={status.get('backpressure')}",
                flush=True,
            )
            if runs >= expected:
                break
            time.sleep(max(0.0, 0.5 - (time.monotonic() - now)))
        cpu_end = _cpu(cluster)
        pg_end = _pg_cpu(cluster.engine)
    rates = _rates(samples, first_run_at, expected)
    used = {i: cpu_end.get(i, 0.0) - cpu_start.get(i, 0.0) for i in cpu_start}
    rates["cpu_leader"] = used.get(leader, 0.0)
    rates["cpu_followers"] = sum(v for i, v in used.items() if i != leader)
    rates["load"] = os.getloadavg()[0]
    # CPU per run: what bounds throughput on a machine this busy (2 cores shared with other
    # work, so the wall-clock rate says more about the neighbours than about raftsched).
    arrived = samples[-1][1] - first_runs if first_run_at is not None else 0
    rates["node_ms_per_run"] = 1000 * sum(used.values()) / arrived if arrived else 0.0
    pg_used = sum(v - pg_start.get(pid, 0.0) for pid, v in pg_end.items())
    rates["pg_ms_per_run"] = 1000 * pg_used / arrived if arrived and pg_end else 0.0
    return rates


def _cpu_seconds(pid: int | None) -> float:
    """utime + stime of one process (0 when gone)."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def _cpu(cluster: ClusterHarness) -> dict[int, float]:
    return {node.index: _cpu_seconds(node.pid) for node in cluster.nodes}


def _pg_cpu(engine: sa.Engine) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend serving this bench's database (a local server;
    backends that ended meanwhile are not counted). Empty for SQLite."""
    if engine.dialect.name != "postgresql":
        return {}
    query = "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    try:
        with engine.connect() as conn:
            pids = [int(row[0]) for row in conn.exec_driver_sql(query)]
    except sa.exc.DBAPIError:
        return {}
    return {pid: _cpu_seconds(pid) for pid in pids}


def _rates(samples, first_run_at, expected) -> dict[str, float]:  # type: ignore[no-untyped-def]
    if len(samples) < 2 or first_run_at is None:
        return dict.fromkeys(
            ("runs", "seconds", "runs_per_s", "peak_runs_per_s", "outbox_per_s", "raft_per_s"), 0
        )
    active = [s for s in samples if s[0] >= first_run_at - 1.0]
    t0, t1 = active[0], active[-1]
    seconds = max(1e-6, t1[0] - t0[0])
    peak = max(
        ((b[1] - a[1]) / max(1e-6, b[0] - a[0]) for a, b in itertools.pairwise(samples)),
        default=0.0,
    )
    return {
        "runs": t1[1],
        "seconds": seconds,
        "runs_per_s": (t1[1] - t0[1]) / seconds,
        "peak_runs_per_s": peak,
        "outbox_per_s": (t1[2] - t0[2]) / seconds,
        "raft_per_s": (t1[3] - t0[3]) / seconds,
    }


def _tick_stalls(log_dir: Path, since: datetime) -> list[tuple[float, float]]:
    """The stalls the nodes' TickWatch logged at or after ``since``: (ms, ms of it the tick
    thread was on CPU). It logs at most one a second per node: the figures are a sample."""
    pattern = re.compile(
        r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) .*raft tick thread stalled (\d+) ms"
        r"(?:, (\d+) ms of it on CPU)?"
    )
    out = []
    for path in sorted(log_dir.glob("node-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            found = pattern.match(line)
            if found is None:
                continue
            at = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=since.tzinfo)
            if at >= since:
                out.append((float(found[2]), float(found[3] or 0)))
    return out


def _term_now(cluster: ClusterHarness, watch: TermWatch) -> int:
    """The highest term any node reports now (or the watcher saw before)."""
    now = [int((s or {}).get("term") or 0) for s in cluster.statuses().values()]
    return max([watch.term(), *now])


# -- the burst shape -------------------------------------------------------------------------


def burst_file(first: int, count: int, start: datetime) -> str:
    """One DAG file defining DAGs burst_<first>..burst_<first+count-1> (a child process per
    file: 10,000 one-DAG files would take minutes to parse)."""
    return textwrap.dedent(
        f"""\
        from datetime import datetime

        from raftsched import DAG, BashTask

        for i in range({first}, {first + count}):
            with DAG(
                f"burst_{{i}}",
                schedule="* * * * *",
                start_date=datetime.fromisoformat({start.isoformat()!r}),
                catchup=False,
            ) as dag:
                BashTask("noop", command="true")
        """
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class TermWatch:
    """Samples every node's /status term on a thread of its own (a leader change during the
    burst is what this shape must not cause); ``terms()`` is the highest term seen so far."""

    def __init__(self, cluster: ClusterHarness, interval: float = 0.25) -> None:
        self._cluster = cluster
        self._interval = interval
        self._stop = threading.Event()
        self._highest = 0
        self._thread = threading.Thread(target=self._run, name="term-watch", daemon=True)

    def __enter__(self) -> TermWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def term(self) -> int:
        return self._highest

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for node in self._cluster.nodes:
                status = node.status(timeout=0.5) or {}
                self._highest = max(self._highest, int(status.get("term") or 0))


def burst_main(args: argparse.Namespace) -> int:
    from api_harness import ApiCluster  # grpc: only for this shape

    backend = "sqlite" if args.backend == "sqlite" else "postgres"
    workdir = Path(tempfile.mkdtemp(prefix="raftsched-bench-burst-"))
    admin = None
    name = f"raftsched_bench_{uuid.uuid4().hex[:12]}"
    try:
        if backend == "postgres":
            admin_url = os.environ.get("RAFTSCHED_TEST_PG_URL") or DEFAULT_PG
            admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        else:
            url = f"sqlite:///{workdir / 'raftsched.db'}"
        # The slot: a minute boundary far enough ahead to parse and register every DAG first.
        now = utcnow()
        lead = args.lead or 30 + args.burst / 100  # seconds to parse and register every DAG
        slot = (now + timedelta(seconds=lead)).replace(second=0, microsecond=0)
        slot += timedelta(minutes=1)
        per_file = 100
        dags = {
            f"burst_{first}.py": burst_file(first, min(per_file, args.burst - first), slot)
            for first in range(0, args.burst, per_file)
        }
        record = workdir / "arrivals.jsonl"
        config = {"scheduler": {"min_file_process_interval": 600, "max_outbox": 200000}}
        terms: dict[str, int] = {}
        with (
            ApiCluster(workdir / "c", url, dags=dags, config=config) as cluster,
            TermWatch(cluster) as watch,
        ):
            cluster.start()
            leader = cluster.wait_leader(timeout=90)
            terms["settled"] = _term_now(cluster, watch)
            count = sa.select(sa.func.count()).select_from(sa.table("dags"))

            def registered() -> int:
                try:
                    with cluster.engine.connect() as conn:
                        return int(conn.execute(count).scalar_one())
                except sa.exc.DBAPIError:
                    return 0

            try:
                wait_for(
                    lambda: registered() >= args.burst,
                    timeout=max(5.0, (slot - utcnow()).total_seconds() - 2),
                    what=f"{args.burst} DAGs registered before the slot",
                    interval=1.0,
                )
            except AssertionError:
                print(f"  only {registered()} DAGs registered before the slot: try a longer --lead")
                print(f"  elections while registering: {watch.term() - terms['settled']}")
                return 1
            print(
                f"  {args.burst} DAGs registered; slot {slot.isoformat()} in"
                f" {(slot - utcnow()).total_seconds():.1f}s",
                flush=True,
            )
            for i in range(args.workers):
                cluster.start_worker(
                    f"b{i}", concurrency=args.concurrency, noop=True, record=record
                )
            wait_for(lambda: utcnow() >= slot, timeout=600, what="the slot", interval=0.2)
            cpu_start = _cpu(cluster)
            terms["slot"] = watch.term()

            def arrivals() -> int:
                return len(record.read_text().splitlines()) if record.exists() else 0

            try:
                wait_for(
                    lambda: arrivals() >= args.burst,
                    timeout=args.limit,
                    what="every task leased",
                    interval=0.2,
                )
            except AssertionError:
                print(f"  hit the limit ({args.limit:.0f}s)")
            cpu_end = _cpu(cluster)
            terms["end"] = _term_now(cluster, watch)
            log_dir = cluster.log_dir
            found = cluster.leader()
            leader = leader if found is None else found
            # When the leader decided each run (CreateRuns' ``now``), from the DB once written.
            query = sa.text("SELECT created_at FROM dag_run WHERE logical_date = :slot")
            try:
                with cluster.engine.connect() as conn:
                    created = [row[0] for row in conn.execute(query, {"slot": slot})]
            except sa.exc.DBAPIError:
                created = []
        lines = [json.loads(x) for x in record.read_text().splitlines()] if record.exists() else []
        ours = [
            item
            for item in lines
            if datetime.fromisoformat(item["run_id"].split("__", 1)[1]) == slot
        ]
        lags = [item["arrived_at"] - slot.timestamp() for item in ours]
        # A --noop worker records its leases one after the other, each after the Complete of
        # the one before (a commit each): the grants of one Lease answer share a token and
        # reached the worker together, when the first of them was recorded.
        delivered_at: dict[int, float] = {}
        for item in ours:
            token = int(item["token"])
            delivered_at[token] = min(
                delivered_at.get(token, item["arrived_at"]), item["arrived_at"]
            )
        delivered = [delivered_at[int(item["token"])] - slot.timestamp() for item in ours]
        used = {i: cpu_end.get(i, 0.0) - cpu_start.get(i, 0.0) for i in cpu_start}
        print(
            f"\nburst: {args.burst} DAGs due {slot.isoformat()}, {backend}, 3 nodes,"
            f" {args.workers} noop workers x {args.concurrency}"
        )
        print(
            f"  elections (terms begun): while registering {terms['slot'] - terms['settled']},"
            f" from the slot to the end {terms['end'] - terms['slot']}"
        )
        stalls = _tick_stalls(log_dir, slot)
        stalled = sum(gap for gap, _ in stalls)
        print(
            f"  raft tick stalls >= 150 ms logged from the slot on: {len(stalls)}"
            + (
                f", longest {max(gap for gap, _ in stalls):.0f} ms, the tick thread on CPU"
                f" {100 * sum(cpu for _, cpu in stalls) / stalled:.0f}% of the stalled time"
                if stalls
                else ""
            )
        )
        if not lags:
            print("  no task arrived for the slot (--keep for the logs)")
            return 0
        decided = sorted(
            (c if c.tzinfo else c.replace(tzinfo=slot.tzinfo)).timestamp() - slot.timestamp()
            for c in created
            if c is not None
        )
        if decided:
            print(
                f"  runs in the DB: {len(decided)}; decided (CreateRuns' now - slot):"
                f" p50 {percentile(decided, 0.5):.3f}s, p99 {percentile(decided, 0.99):.3f}s,"
                f" last {decided[-1]:.3f}s"
            )
        print(
            f"  within 3 s of the slot: runs created {sum(1 for d in decided if d <= 3.0)},"
            f" leases delivered {sum(1 for lag in delivered if lag <= 3.0)}, leases"
            f" processed by the noop workers {sum(1 for lag in lags if lag <= 3.0)}"
            f" (of {args.burst})"
        )
        print(
            f"  lease delivered (slot -> the Lease answer reached a worker): p50"
            f" {percentile(delivered, 0.5):.3f}s, p99 {percentile(delivered, 0.99):.3f}s,"
            f" max {max(delivered):.3f}s; {len(delivered_at)} Lease answers"
        )
        print(
            f"  leased: {len(lags)} of {args.burst}; all processed {max(lags):.2f}s after the"
            f" slot (first {min(lags):.2f}s)"
        )
        print(
            f"  schedule lag (slot -> lease processed on a noop worker): p50"
            f" {percentile(lags, 0.5):.3f}s, p99 {percentile(lags, 0.99):.3f}s,"
            f" max {max(lags):.3f}s"
        )
        print(
            f"  cpu during the burst: leader {used.get(leader, 0.0):.1f}s, followers"
            f" {sum(v for i, v in used.items() if i != leader):.1f}s;"
            f" loadavg {os.getloadavg()[0]:.2f}"
        )
        return 0
    finally:
        if admin is not None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.dispose()
        _cleanup(workdir, args.keep)


if __name__ == "__main__":
    sys.exit(main())
