"""Query plans of the history reads on PostgreSQL: a synthetic history and EXPLAIN of the
exact SQL the store functions send.

Used by ``scripts/bench/db_explain.py`` (figures) and ``tests/integration/
test_store_query_plans.py`` (index checks); never by the scheduler itself. The plan is taken
of the statement a store function really executes (caught with a ``before_cursor_execute``
listener, then run again under ``EXPLAIN``), so the figures follow the code, not a copy of
its SQL.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from raftsched.store import quarantine as q
from raftsched.store import queries

BASE_DATE = datetime(2024, 1, 1, tzinfo=UTC)
TASKS_PER_RUN = 5
LOG_CHUNKS_PER_ATTEMPT = 10
# The newest runs of every DAG are still active; older ones mostly succeeded.
ACTIVE_PER_DAG = 2
FAILED_PERCENT = 8
MANUAL_PERCENT = 5

# Tables that grow with the history: a read of one of them must be an index range.
BIG_TABLES = frozenset({"dag_run", "task_instance", "task_log"})


@dataclass(frozen=True)
class SyntheticHistory:
    """Sizes of the generated history: ``dags`` DAGs x ``runs_per_dag`` hourly runs (every
    DAG on the same hours, so logical dates tie across DAGs, as with real schedules), each
    with :data:`TASKS_PER_RUN` task attempts; the oldest ``logged_runs_per_dag`` runs per DAG have
    :data:`LOG_CHUNKS_PER_ATTEMPT` log chunks per attempt."""

    dags: int = 200
    runs_per_dag: int = 1000
    logged_runs_per_dag: int = 100

    @property
    def runs(self) -> int:
        return self.dags * self.runs_per_dag

    @property
    def task_instances(self) -> int:
        return self.runs * TASKS_PER_RUN

    @property
    def log_rows(self) -> int:
        return self.dags * self.logged_runs_per_dag * TASKS_PER_RUN * LOG_CHUNKS_PER_ATTEMPT

    def dag_id(self, i: int) -> str:
        return f"dag_{i:04d}"

    def logical_date(self, k: int) -> datetime:
        return BASE_DATE + timedelta(hours=k)

    def run_id(self, k: int) -> str:
        return f"scheduled__{k:06d}"


# Every row's values derive from (dag number d, run number k): no randomness, so two loads
# give the same data and the same plans.
_LOAD_SQL = (
    """
    INSERT INTO dags (dag_id, fileloc, spec, spec_hash, paused, active, updated_at)
    SELECT 'dag_' || lpad(d::text, 4, '0'), '/dags/dag_' || d || '.py', '{}'::json,
           md5(d::text), d % 10 = 0, true, :base
    FROM generate_series(0, :dags - 1) AS d
    """,
    """
    INSERT INTO dag_run (dag_id, run_id, logical_date, data_interval_start, data_interval_end,
                         run_type, state, conf, created_at, start_date, end_date)
    SELECT 'dag_' || lpad(d::text, 4, '0'),
           CASE WHEN (d * 31 + k) % 100 < :manual THEN 'manual__' ELSE 'scheduled__' END
               || lpad(k::text, 6, '0'),
           :base + k * interval '1 hour', :base + (k - 1) * interval '1 hour',
           :base + k * interval '1 hour',
           CASE WHEN (d * 31 + k) % 100 < :manual THEN 'manual' ELSE 'scheduled' END,
           CASE WHEN k >= :runs - :active THEN 'running'
                WHEN (d * 7 + k * 13) % 100 < :failed THEN 'failed'
                ELSE 'success' END,
           '{}'::json, :base + k * interval '1 hour', :base + k * interval '1 hour',
           CASE WHEN k >= :runs - :active THEN NULL
                ELSE :base + k * interval '1 hour' + interval '5 minutes' END
    FROM generate_series(0, :dags - 1) AS d, generate_series(0, :runs - 1) AS k
    """,
    """
    INSERT INTO task_instance (dag_id, run_id, task_id, try_number, state, worker_id,
                               lease_token, queued_at, start_date, end_date, exit_code, message)
    SELECT r.dag_id, r.run_id, 'task_' || t, 1,
           CASE WHEN r.state = 'running' THEN 'running' ELSE r.state END,
           'worker-' || (t % 4), 1, r.logical_date, r.logical_date, r.end_date,
           CASE WHEN r.state = 'failed' THEN 1 WHEN r.state = 'success' THEN 0 END, ''
    FROM dag_run AS r, generate_series(0, :tasks - 1) AS t
    """,
    """
    INSERT INTO task_log (dag_id, run_id, task_id, try_number, chunk_seq, stream, text,
                          created_at)
    SELECT r.dag_id, r.run_id, 'task_' || t, 1, s, CASE WHEN s % 5 = 4 THEN 'stderr'
           ELSE 'stdout' END, 'line ' || s || ' of task_' || t || ' in ' || r.run_id,
           r.logical_date + s * interval '1 second'
    FROM dag_run AS r, generate_series(0, :tasks - 1) AS t, generate_series(1, :chunks) AS s
    WHERE r.logical_date < :base + :logged * interval '1 hour'
    """,
    """
    INSERT INTO import_error (fileloc, message, traceback, updated_at)
    SELECT '/dags/broken_' || i || '.py', 'SyntaxError', 'Traceback ...', :base
    FROM generate_series(1, 20) AS i
    """,
    """
    INSERT INTO outbox_quarantine (seq, kind, data, error, quarantined_at)
    SELECT i, 'task_log', '{}', 'invalid byte sequence', :base
    FROM generate_series(1, 50) AS i
    """,
)


def load(conn: Connection, size: SyntheticHistory) -> None:
    """Fill the (empty, migrated) history tables with ``size`` rows and ANALYZE them."""
    params = {
        "base": BASE_DATE,
        "dags": size.dags,
        "runs": size.runs_per_dag,
        "active": ACTIVE_PER_DAG,
        "failed": FAILED_PERCENT,
        "manual": MANUAL_PERCENT,
        "tasks": TASKS_PER_RUN,
        "chunks": LOG_CHUNKS_PER_ATTEMPT,
        "logged": size.logged_runs_per_dag,
    }
    for sql in _LOAD_SQL:
        names = {name for name in params if f":{name}" in sql}
        conn.execute(sa.text(sql), {name: params[name] for name in names})
    for table in ("dags", "dag_run", "task_instance", "task_log", "import_error"):
        conn.exec_driver_sql(f"ANALYZE {table}")
    conn.exec_driver_sql("ANALYZE outbox_quarantine")


# -- the reads ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """One history read as the API makes it: ``call(engine)`` runs the store function."""

    name: str
    serves: str
    call: Callable[[Engine], Any]
    key: bool = True  # must use an index on a big table (the test checks these)


def reads(size: SyntheticHistory, page: int = 200) -> list[Read]:
    """Every DB read of the API's read side, with realistic parameters for ``size``.

    ``page`` is the DB chunk :func:`raftsched.api.servicers.history.db_runs_after` reads."""
    dag = size.dag_id(size.dags // 3)
    mid = size.runs_per_dag // 2
    mid_date = size.logical_date(mid)
    run = size.run_id(mid)
    logged_run = size.run_id(size.logged_runs_per_dag // 2)

    def quarantine_list(engine: Engine) -> Any:
        with engine.connect() as conn:
            return q.load(conn)

    def quarantine_count(engine: Engine) -> Any:
        with engine.connect() as conn:
            return q.count(conn)

    return [
        Read(
            "recent_runs_of_dag",
            "DAG list: each DAG's newest runs (RecentRunsCache, limit 10)",
            lambda e: queries.list_runs(e, dag, limit=10),
        ),
        Read(
            "runs_of_dag_first_page",
            "ListRuns dag_id=X, first page",
            lambda e: queries.list_runs(e, dag, limit=page),
        ),
        Read(
            "runs_of_dag_keyset_page",
            "ListRuns dag_id=X, page token (before=cursor date)",
            lambda e: queries.list_runs(e, dag, before=mid_date, limit=page),
        ),
        Read(
            "runs_all_first_page",
            "ListRuns (all DAGs), first page",
            lambda e: queries.list_runs(e, None, limit=page),
        ),
        Read(
            "runs_all_keyset_page",
            "ListRuns (all DAGs), page token (before=cursor date)",
            lambda e: queries.list_runs(e, None, before=mid_date, limit=page),
        ),
        Read(
            "runs_all_keyset_offset",
            "ListRuns (all DAGs), page token, 2nd DB chunk (offset)",
            lambda e: queries.list_runs(e, None, before=mid_date, limit=page, offset=page),
        ),
        Read(
            "runs_by_state_failed",
            "ListRuns states=[failed] (all DAGs)",
            lambda e: queries.list_runs(e, None, states=["failed"], limit=page),
        ),
        Read(
            "runs_by_state_failed_keyset",
            "ListRuns states=[failed] (all DAGs), page token",
            lambda e: queries.list_runs(e, None, states=["failed"], before=mid_date, limit=page),
        ),
        Read(
            "runs_by_states_active",
            "ListRuns states=[queued, running] (all DAGs)",
            lambda e: queries.list_runs(e, None, states=["queued", "running"], limit=page),
        ),
        Read(
            "runs_of_dag_by_state",
            "ListRuns dag_id=X states=[failed]",
            lambda e: queries.list_runs(e, dag, states=["failed"], limit=page),
        ),
        Read(
            "runs_by_type_manual",
            "ListRuns run_type=manual (all DAGs)",
            lambda e: queries.list_runs(e, None, run_type="manual", limit=page),
        ),
        Read(
            "trigger_history_check",
            "TriggerDag: is the logical date taken in the history",
            lambda e: queries.list_runs(
                e, dag, before=mid_date + timedelta(microseconds=1), limit=1
            ),
        ),
        Read(
            "run_dates_between",
            "BackfillDag: dates taken in a week",
            lambda e: queries.run_dates_between(e, dag, mid_date, mid_date + timedelta(days=7)),
        ),
        Read("get_run", "a run by id", lambda e: queries.get_run(e, dag, run)),
        Read(
            "task_instances_of_run",
            "ListTaskInstances (run grid)",
            lambda e: queries.list_task_instances(e, dag, run),
        ),
        Read(
            "attempts_of_task",
            "GetTaskLog: latest try, finished-in-DB check",
            lambda e: queries.list_task_instances(e, dag, run, task_id="task_2"),
        ),
        Read(
            "task_log_after_seq",
            "GetTaskLog: chunks after a seq (batch 1000)",
            lambda e: queries.read_log(e, dag, logged_run, "task_2", 1, after_seq=3, limit=1000),
        ),
        Read(
            "task_log_tail_probe",
            "GetTaskLog follow: anything after the last chunk",
            lambda e: queries.read_log(e, dag, logged_run, "task_2", 1, after_seq=10, limit=1),
        ),
        Read("import_errors", "import errors (DB copy)", queries.list_import_errors, key=False),
        Read("quarantine_list", "raftsched db quarantine list", quarantine_list, key=False),
        Read("quarantine_count", "status: quarantined entries", quarantine_count, key=False),
    ]


# -- EXPLAIN --------------------------------------------------------------------------------


@dataclass
class PlanSummary:
    name: str
    nodes: list[str] = field(default_factory=list)  # "Index Scan on dag_run using ix_..."
    seq_scans: list[str] = field(default_factory=list)  # tables read with a Seq Scan
    indexes: list[str] = field(default_factory=list)
    sorts: list[tuple[str, float]] = field(default_factory=list)  # (node type, rows sorted)
    execution_ms: float = 0.0
    planning_ms: float = 0.0
    shared_hit: int = 0
    shared_read: int = 0
    rows: float = 0.0
    plan: dict[str, Any] = field(default_factory=dict)

    @property
    def uses_index(self) -> bool:
        return bool(self.indexes)

    def big_seq_scans(self) -> list[str]:
        return [table for table in self.seq_scans if table in BIG_TABLES]

    def largest_sort(self) -> float:
        return max((rows for _, rows in self.sorts), default=0.0)


def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _walk(child)


def summarize(name: str, explained: list[dict[str, Any]]) -> PlanSummary:
    """A summary of ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` output."""
    top = explained[0]
    root = top["Plan"]
    out = PlanSummary(
        name=name,
        execution_ms=float(top.get("Execution Time", 0.0)),
        planning_ms=float(top.get("Planning Time", 0.0)),
        shared_hit=int(root.get("Shared Hit Blocks", 0)),
        shared_read=int(root.get("Shared Read Blocks", 0)),
        rows=float(root.get("Actual Rows", 0.0)),
        plan=root,
    )
    for node in _walk(root):
        kind = node["Node Type"]
        label = kind
        if "Relation Name" in node:
            label += f" on {node['Relation Name']}"
        if "Index Name" in node:
            label += f" using {node['Index Name']}"
            out.indexes.append(node["Index Name"])
        if kind == "Seq Scan":
            out.seq_scans.append(node.get("Relation Name", "?"))
        if kind in ("Sort", "Incremental Sort"):
            # Rows fed into the sort: its input's actual rows (loops included).
            child = node.get("Plans", [{}])[0]
            fed = float(child.get("Actual Rows", 0.0)) * float(child.get("Actual Loops", 1.0))
            out.sorts.append((kind, fed))
            label += f" ({fed:.0f} rows in)"
        out.nodes.append(label)
    return out


def explain(engine: Engine, read: Read, *, analyze: bool = True) -> PlanSummary:
    """Run ``read`` once, catching the last SELECT it sends, and EXPLAIN that statement with
    the same (already bound) parameters."""
    caught: list[tuple[str, Any]] = []
    lock = threading.Lock()

    def catch(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            with lock:
                caught.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", catch)
    try:
        read.call(engine)
    finally:
        event.remove(engine, "before_cursor_execute", catch)
    if not caught:
        raise RuntimeError(f"{read.name}: the store function sent no SELECT")
    statement, parameters = caught[-1]
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
    with engine.connect() as conn:
        raw = conn.exec_driver_sql(f"EXPLAIN ({options}) {statement}", parameters).scalar_one()
    explained = raw if isinstance(raw, list) else json.loads(raw)
    return summarize(read.name, explained)
