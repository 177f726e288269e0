#!/usr/bin/env python
"""Query plans of the API's history reads on PostgreSQL, on a realistic history.

Creates a database of its own on the server of ``--url`` (default: $RAFTSCHED_TEST_PG_URL),
named ``explain_<random>``, migrates it with the project's migrations (to head, or to
``--revision`` to see an older schema), loads a synthetic history with ``INSERT ... SELECT
generate_series`` (default: 200 DAGs, 200,000 runs, 1,000,000 task instances, 1,000,000
log rows), ANALYZEs it, then runs every DB read of the read side
(:func:`scripts.bench.plans.reads`: the exact statement each store function sends) under
``EXPLAIN (ANALYZE, BUFFERS)`` and prints, per read: the plan's nodes, the indexes used,
sequential scans and sorts (with the rows fed into them), and the execution time (best of
``--repeat``). The database is dropped at the end (``--keep`` keeps it).

    .venv/bin/python scripts/bench/db_explain.py
    .venv/bin/python scripts/bench/db_explain.py --revision 0002     # before the indexes
    .venv/bin/python scripts/bench/db_explain.py --dags 50 --runs-per-dag 400 --plans

Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from alembic import command

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # scripts.bench, raftsched

from raftsched.store.engine import create_engine_for
from raftsched.store.migrate import alembic_config
from scripts.bench import plans


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("RAFTSCHED_TEST_PG_URL"))
    parser.add_argument("--revision", default="head", help="migrate to this revision")
    parser.add_argument("--dags", type=int, default=200)
    parser.add_argument("--runs-per-dag", type=int, default=1000)
    parser.add_argument("--logged-runs-per-dag", type=int, default=100)
    parser.add_argument("--page", type=int, default=200, help="DB chunk of a runs page")
    parser.add_argument("--repeat", type=int, default=3, help="runs per read (best is shown)")
    parser.add_argument("--plans", action="store_true", help="print every plan node")
    parser.add_argument("--keep", action="store_true", help="keep the database")
    args = parser.parse_args()
    if not args.url:
        parser.error("no PostgreSQL: pass --url postgresql+psycopg://USER@HOST:PORT/DB")

    admin_url = sa.make_url(args.url)
    if admin_url.get_backend_name() != "postgresql":
        parser.error(f"--url must be PostgreSQL, not {admin_url.get_backend_name()}")
    name = f"explain_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine = create_engine_for(admin_url.set(database=name))
    try:
        size = plans.SyntheticHistory(args.dags, args.runs_per_dag, args.logged_runs_per_dag)
        with engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.upgrade(config, args.revision)
            revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
        started = time.monotonic()
        with engine.begin() as conn:
            plans.load(conn, size)
        loaded = time.monotonic() - started
        print(f"database {name} at revision {revision}")
        print(
            f"loaded {size.dags:,} DAGs, {size.runs:,} runs, {size.task_instances:,} task"
            f" instances, {size.log_rows:,} log rows in {loaded:.1f} s (ANALYZE included)"
        )
        with engine.connect() as conn:
            for table in ("dag_run", "task_instance", "task_log"):
                total = conn.exec_driver_sql(
                    f"SELECT pg_size_pretty(pg_total_relation_size('{table}')),"
                    f" pg_size_pretty(pg_indexes_size('{table}'))"
                ).one()
                print(f"  {table}: {total[0]} total, {total[1]} of indexes")
        print()
        print(f"{'read':30} {'exec ms':>8} {'buffers':>8}  index / seq scan / sort")
        for read in plans.reads(size, page=args.page):
            best: plans.PlanSummary | None = None
            for _ in range(max(1, args.repeat)):
                summary = plans.explain(engine, read)
                if best is None or summary.execution_ms < best.execution_ms:
                    best = summary
            assert best is not None
            notes = []
            if best.indexes:
                notes.append("index " + ",".join(dict.fromkeys(best.indexes)))
            if best.seq_scans:
                notes.append("SEQ SCAN " + ",".join(best.seq_scans))
            for kind, rows in best.sorts:
                notes.append(f"{kind} of {rows:,.0f} rows")
            buffers = best.shared_hit + best.shared_read
            print(
                f"{read.name:30} {best.execution_ms:8.2f} {buffers:8,}  "
                + ("; ".join(notes) or "-")
            )
            if args.plans:
                for node in best.nodes:
                    print(f"{'':32}{node}")
    finally:
        engine.dispose()
        if args.keep:
            print(f"kept database {name}")
        else:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
