#!/usr/bin/env python
"""Rolling restart under a 1-second DAG: missed slots, schedule lag, elections.

Three real `raftsched scheduler` nodes and a no-op worker run a 1-second DAG (catch-up on, so
a late slot shows up as lag, a lost one as missed). Each node in turn, the leader first, gets
SIGTERM, is restarted, and the cluster is left ``--wait`` seconds after it answers again. Then
the DB is read: for every slot from ``--margin`` seconds before the first SIGTERM to
``--margin`` seconds after the last restart,

- missed: slots with no run;
- decision lag: the run's ``created_at`` (the leader's CreateRuns) minus its slot;
- start lag: the run's ``start_date`` (its first task leased by the worker) minus its slot;
- late: slots whose run started more than one schedule interval (1 s) after the slot;

and elections (leader terms begun during the restarts; a handover is one term per leader
restart) are read from every node's /status.

    .venv/bin/python scripts/bench/rolling.py                 # PostgreSQL if RAFTSCHED_TEST_PG_URL
    .venv/bin/python scripts/bench/rolling.py --no-handover   # stop leaders as before (issue 16)
    .venv/bin/python scripts/bench/rolling.py --db sqlite --rounds 2

``--no-handover`` sets ``[cluster] handover_timeout = 0`` (a stopping leader does not hand
over). Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

import sqlalchemy as sa
from api_harness import ApiCluster
from harness import every_second_dag, utcnow, wait_for, whole_second

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DAG_ID = "rolling_1s"
INTERVAL = 1.0  # seconds between slots of the DAG


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="")
    parser.add_argument("--rounds", type=int, default=1, help="rolling restarts of all nodes")
    parser.add_argument("--wait", type=float, default=8.0, help="seconds after a node is back")
    parser.add_argument("--margin", type=float, default=5.0, help="seconds measured around")
    parser.add_argument("--no-handover", action="store_true", help="handover_timeout = 0")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    backend = args.db or ("postgres" if os.environ.get("RAFTSCHED_TEST_PG_URL") else "sqlite")
    workdir = Path(tempfile.mkdtemp(prefix="raftsched-bench-rolling-"))
    admin: sa.Engine | None = None
    name = ""
    if backend == "postgres":
        admin_url = os.environ.get("RAFTSCHED_TEST_PG_URL") or DEFAULT_PG
        name = f"raftsched_bench_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        db_url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    else:
        db_url = f"sqlite:///{workdir / 'raftsched.db'}"
    config: dict[str, dict[str, Any]] = {}
    if args.no_handover:
        config["cluster"] = {"handover_timeout": 0}
    start = whole_second(utcnow()) - timedelta(seconds=2)
    dags = {f"{DAG_ID}.py": every_second_dag(DAG_ID, start=start, catchup=True)}
    try:
        with ApiCluster(workdir, db_url, dags=dags, config=config) as cluster:
            run(cluster, args, backend)
    finally:
        if admin is not None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.dispose()
        if not args.keep:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"work directory kept: {workdir}")
    return 0


def run(cluster: ApiCluster, args: argparse.Namespace, backend: str) -> None:
    cluster.start()
    cluster.wait_leader(timeout=90)
    client = cluster.client()
    cluster.wait_dags(client, {DAG_ID}, timeout=90)
    cluster.start_worker("noop", noop=True, concurrency=4)
    wait_for(lambda: _started(cluster) >= 3, timeout=90, what="runs started by the worker")
    cluster.wait_caught_up(timeout=60, outbox=False)
    time.sleep(args.margin + 2.0)  # the start-up catch-up of the first slots stays outside
    handover = "off" if args.no_handover else "on"
    print(
        f"3 nodes on {backend}, a 1-second DAG, no-op worker; handover {handover};"
        f" {args.rounds} rolling restart(s), {args.wait:g}s after each node is back",
        flush=True,
    )
    terms_before = _terms(cluster)
    began = utcnow()
    stop_seconds: list[float] = []
    for round_no in range(1, args.rounds + 1):
        leader = cluster.wait_leader(timeout=60)
        order = [leader] + [i for i in range(len(cluster.nodes)) if i != leader]
        for index in order:
            node = cluster.nodes[index]
            role = (node.status() or {}).get("role", "?")
            sent = time.monotonic()
            code = node.stop(timeout=20)
            stop_seconds.append(time.monotonic() - sent)
            print(
                f"round {round_no}: node {index} ({role}) stopped in"
                f" {stop_seconds[-1]:.2f}s (exit {code})",
                flush=True,
            )
            node.start()
            wait_for(lambda n=node: n.status(), timeout=60, what=f"node {index} to answer")
            cluster.wait_caught_up(timeout=60, outbox=False)
            time.sleep(args.wait)
    ended = utcnow()
    time.sleep(args.margin + 2.0)  # the margin after, and the last slots' first leases
    terms_after = _terms(cluster)
    cluster.wait_caught_up(timeout=60)
    since = began - timedelta(seconds=args.margin)
    report(cluster, since, ended + timedelta(seconds=args.margin), terms_before, terms_after)
    print(
        f"SIGTERM -> exit: median {statistics.median(stop_seconds):.2f}s,"
        f" max {max(stop_seconds):.2f}s"
    )


def _started(cluster: ApiCluster) -> int:
    from raftsched.store.tables import dag_run

    try:
        with cluster.engine.connect() as conn:
            query = sa.select(sa.func.count()).where(dag_run.c.start_date.is_not(None))
            return int(conn.execute(query.select_from(dag_run)).scalar() or 0)
    except sa.exc.SQLAlchemyError:  # no table yet
        return 0


def _terms(cluster: ApiCluster) -> int:
    return max(int((s or {}).get("term") or 0) for s in cluster.statuses().values())


def report(cluster: ApiCluster, since: datetime, until: datetime, before: int, after: int) -> None:
    from raftsched.store.tables import dag_run

    with cluster.engine.connect() as conn:
        rows = conn.execute(
            sa.select(dag_run.c.logical_date, dag_run.c.created_at, dag_run.c.start_date).where(
                dag_run.c.dag_id == DAG_ID
            )
        ).all()
    runs = {_utc(r.logical_date): (_utc(r.created_at), _utc(r.start_date)) for r in rows}
    first = whole_second(since)
    slots = [first + timedelta(seconds=i) for i in range(int((until - first).total_seconds()))]
    missed = [slot for slot in slots if slot not in runs]
    decided = [(runs[s][0] - s).total_seconds() for s in slots if s in runs and runs[s][0]]
    started = [(runs[s][1] - s).total_seconds() for s in slots if s in runs and runs[s][1]]
    not_started = sum(1 for s in slots if s in runs and runs[s][1] is None)
    late = sum(1 for lag in started if lag > INTERVAL)
    print(f"\nslots measured: {len(slots)} ({first:%H:%M:%S} .. {until:%H:%M:%S} UTC)")
    print(f"missed slots: {len(missed)}")
    print(f"late slots (run started > {INTERVAL:g}s after its slot): {late}")
    if not_started:
        print(f"runs not started yet: {not_started}")
    print("lag (ms)               p50      p99      max")
    for label, values in (("decision (created)", decided), ("start (1st lease)", started)):
        if values:
            print(
                f"  {label:18s} {_pct(values, 50) * 1000:7.0f}  {_pct(values, 99) * 1000:7.0f}"
                f"  {max(values) * 1000:7.0f}"
            )
    print(f"elections: {after - before} (terms {before} -> {after})")


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


if __name__ == "__main__":
    sys.exit(main())
