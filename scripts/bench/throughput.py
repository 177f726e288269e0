#!/usr/bin/env python
"""Throughput: scheduling decisions committed and materialized per second, 3 nodes.

Registers many DAGs with a 1-second schedule, catch-up on, a start date in the past and an end
date of "now", so the leader has a known backlog of runs to create (DAGS x BACKLOG runs). Then
samples the leader's /status and the DB twice a second: Raft commit index, outbox entries
(``outbox_last_seq``), DB watermark and rows in ``dag_run``, until every run is in the DB or
the time limit passes. Once on SQLite and once on PostgreSQL (a database of its own, created
and dropped; the server from $RAFTSCHED_TEST_PG_URL, default 127.0.0.1:5432/test).

    .venv/bin/python scripts/bench/throughput.py --dags 20 --backlog 600 --limit 120

No asserts: prints figures.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

from harness import ClusterHarness, second_dags, utcnow, whole_second

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dags", type=int, default=20)
    parser.add_argument("--backlog", type=int, default=600, help="seconds of missed slots")
    parser.add_argument("--limit", type=float, default=120, help="max seconds per backend")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--keep", action="store_true", help="keep work dirs (node logs)")
    args = parser.parse_args()

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
        f" {'outbox/s':>9} {'raft idx/s':>11}"
    )
    for backend, r in results:
        print(
            f"{backend:<11} {r['runs']:>7} {r['seconds']:>6.1f} {r['runs_per_s']:>12.0f}"
            f" {r['peak_runs_per_s']:>8.0f} {r['outbox_per_s']:>9.0f} {r['raft_per_s']:>11.1f}"
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
                first_run_at = now
            print(
                f"  t={now - began:6.1f}s runs={runs:7d} outbox_seq={samples[-1][2]:8d}"
                f" commit={samples[-1][3]:7d} watermark={status.get('db_watermark')}"
                f" backpressure={status.get('backpressure')}",
                flush=True,
            )
            if runs >= expected:
                break
            time.sleep(max(0.0, 0.5 - (time.monotonic() - now)))
    return _rates(samples, first_run_at, expected)


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


if __name__ == "__main__":
    sys.exit(main())
