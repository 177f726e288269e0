"""The history reads use indexes that fit them, on PostgreSQL with a realistic table size.

A synthetic history (100 DAGs x 500 hourly runs = 50,000 runs, 250,000 task instances,
100,000 log rows; a few seconds of ``INSERT ... SELECT generate_series``) is loaded and
ANALYZEd, with the planner's settings left alone; then every key read of the API's read side
is EXPLAINed as the store function sends it (``scripts.bench.plans``). At this size a
sequential scan plus a sort of ``dag_run`` is what PostgreSQL picks when no index fits (it
did before migration 0003), so the plan shape is the proof: an index scan, no sequential
scan of a big table, and no sort of more than the page. Timings are not asserted;
``scripts/bench/db_explain.py`` prints them at full size.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from raftsched.store import queries
from raftsched.store import tables as t
from raftsched.store.engine import create_engine_for
from raftsched.store.migrate import init_db
from scripts.bench import plans

SIZE = plans.SyntheticHistory(dags=100, runs_per_dag=500, logged_runs_per_dag=20)
PAGE = 200


@pytest.mark.postgres
def test_history_reads_use_fitting_indexes(postgres_url: str) -> None:
    engine = create_engine_for(postgres_url)
    try:
        init_db(engine)
        with engine.begin() as conn:
            plans.load(conn, SIZE)
        problems: dict[str, str] = {}
        checked = 0
        for read in plans.reads(SIZE, page=PAGE):
            if not read.key:
                continue  # tiny tables (import errors, quarantine): a seq scan is right
            checked += 1
            plan = plans.explain(engine, read)
            wrong = []
            if not plan.uses_index:
                wrong.append("no index")
            if plan.big_seq_scans():
                wrong.append(f"seq scan of {plan.big_seq_scans()}")
            # A page may be sorted (e.g. runs of several states merged), never the table.
            if plan.largest_sort() > 2 * PAGE:
                wrong.append(f"sort of {plan.largest_sort():.0f} rows")
            if wrong:
                problems[read.name] = f"{'; '.join(wrong)}: {' > '.join(plan.nodes)}"
        assert checked >= 15
        assert problems == {}
    finally:
        engine.dispose()


def test_runs_of_several_states_keep_the_list_order(db_engine: sa.Engine) -> None:
    """The per-state merge of list_runs (several states) pages exactly like one filter and
    one sort would, on both databases; ties on logical_date across DAGs included."""
    base = datetime(2024, 1, 1, tzinfo=UTC)
    states = ("success", "failed", "running", "queued")
    rows = [
        {
            "dag_id": f"d{d}",
            "run_id": f"r{k:03d}",
            "logical_date": base + timedelta(hours=k),
            "data_interval_start": base,
            "data_interval_end": base,
            "run_type": "manual" if k % 5 == 0 else "scheduled",
            "state": states[(d + k) % len(states)],
            "conf": {},
        }
        for d in range(3)
        for k in range(40)
        if k % 2 == d % 2 or d == 2  # d2 shares every date with d0 or d1
    ]
    with db_engine.begin() as conn:
        conn.execute(sa.insert(t.dag_run), rows)

    def expected(dag_id: str | None, wanted: set[str], before: datetime | None) -> list[str]:
        keep = [
            r
            for r in rows
            if r["state"] in wanted
            and (dag_id is None or r["dag_id"] == dag_id)
            and (before is None or r["logical_date"] < before)
        ]
        keep.sort(key=lambda r: (-r["logical_date"].timestamp(), r["dag_id"], r["run_id"]))
        return [f"{r['dag_id']}/{r['run_id']}" for r in keep]

    before = base + timedelta(hours=23)
    for dag_id in (None, "d2"):
        for wanted in ({"success", "failed"}, {"running", "queued", "failed"}):
            for cut in (None, before):
                want = expected(dag_id, wanted, cut)
                for limit, offset in ((5, 0), (5, 5), (7, 12), (1000, 0)):
                    got = queries.list_runs(
                        db_engine, dag_id, states=wanted, before=cut, limit=limit, offset=offset
                    )
                    assert [f"{r.dag_id}/{r.run_id}" for r in got] == want[offset:][:limit]
    manual = queries.list_runs(db_engine, None, states=["success", "failed"], run_type="manual")
    assert manual and all(r.run_type == "manual" for r in manual)
