"""History queries over the metadata DB, for the API layer (runs list, grid, logs, errors).

Read-only and thread-safe. Every function raises StoreUnavailable when the database cannot
be reached and MigrationRequired when it has no schema. Results are plain frozen records or
``core`` types, never rows or ORM objects, so they cross the gRPC layer as data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from raftsched.core.model import (
    DagRecord,
    DagRun,
    DagSpec,
    ImportErrorRecord,
    RunState,
    RunType,
    TaskState,
)
from raftsched.core.slot_policy import SkippedSlots
from raftsched.store import tables as t
from raftsched.store.engine import translate_errors

MAX_PAGE = 1000


@dataclass(frozen=True, slots=True)
class TaskAttempt:
    """One attempt of one task in one run (a task_instance row)."""

    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    state: TaskState
    worker_id: str | None
    lease_token: int | None
    queued_at: datetime | None
    start_date: datetime | None
    end_date: datetime | None
    exit_code: int | None
    message: str
    result_json: str | None = None  # a SUCCESS attempt's XCom (JSON text)


@dataclass(frozen=True, slots=True)
class LogChunk:
    chunk_seq: int
    stream: str  # "stdout" | "stderr"
    text: str
    created_at: datetime


def list_dags(
    engine: Engine,
    *,
    active: bool | None = True,
    paused: bool | None = None,
    limit: int = MAX_PAGE,
    offset: int = 0,
) -> list[DagRecord]:
    """DAGs by dag_id; ``active``/``paused`` None means either. ``last_logical_date`` is
    left None (it is scheduling state, not history: ask the cluster)."""
    table = t.dags
    query = sa.select(table).order_by(table.c.dag_id)
    if active is not None:
        query = query.where(table.c.active == active)
    if paused is not None:
        query = query.where(table.c.paused == paused)
    rows = _fetch(engine, _page(query, limit, offset))
    return [
        DagRecord(
            spec=DagSpec.from_dict(r["spec"]),
            paused=bool(r["paused"]),
            active=bool(r["active"]),
            updated_at=r["updated_at"],
        )
        for r in rows
    ]


def _runs_query(
    dag_id: str | None, states: Iterable[str] | None, run_type: str | None
) -> sa.Select[Any]:
    table = t.dag_run
    query = sa.select(table)
    if dag_id is not None:
        query = query.where(table.c.dag_id == dag_id)
    if states is not None:
        query = query.where(table.c.state.in_([str(s) for s in states]))
    if run_type is not None:
        query = query.where(table.c.run_type == str(run_type))
    return query


def list_runs(
    engine: Engine,
    dag_id: str | None = None,
    *,
    states: Iterable[str] | None = None,
    run_type: str | None = None,
    before: datetime | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[DagRun]:
    """Runs newest first (by logical_date), of one DAG or of all.

    Page with ``offset``, or better with ``before`` (keyset: only runs whose logical_date is
    earlier; pass the last logical_date of the previous page — exact for one DAG, whose
    logical dates are unique).
    """
    table = t.dag_run
    wanted = None if states is None else sorted({str(s) for s in states})
    if wanted is not None and len(wanted) > 1:
        return _runs_of_states(engine, dag_id, wanted, run_type, before, limit, offset)
    query = _runs_query(dag_id, wanted, run_type)
    if before is not None:
        query = query.where(table.c.logical_date < before)
    query = query.order_by(*_list_order(table.c, one_dag=dag_id is not None))
    return [_run(r) for r in _fetch(engine, _page(query, limit, offset))]


def _list_order(columns: Any, *, one_dag: bool) -> list[Any]:
    """The runs list order, (logical_date DESC, dag_id, run_id), as the indexes give it.

    Within one DAG logical dates are unique, so dag_id and run_id never break a tie: leaving
    them out lets PostgreSQL read uq_dag_run_dag_id_logical_date backwards with no sort.
    Across DAGs, ix_dag_run_logical_date / ix_dag_run_state_logical_date are in exactly this
    order."""
    if one_dag:
        return [columns.logical_date.desc()]
    return [columns.logical_date.desc(), columns.dag_id, columns.run_id]


def _runs_of_states(
    engine: Engine,
    dag_id: str | None,
    states: list[str],
    run_type: str | None,
    before: datetime | None,
    limit: int,
    offset: int,
) -> list[DagRun]:
    """:func:`list_runs` of several states: one ordered, limited range of
    ix_dag_run_state_logical_date per state, merged. ``state IN (...)`` would make
    PostgreSQL (before 17) fetch every run in those states and sort them for each page."""
    _page(sa.select(t.dag_run), limit, offset)  # checks the bounds
    table = t.dag_run
    one_dag = dag_id is not None
    reach = min(limit, MAX_PAGE) + offset  # the page's rows are among each state's first
    branches = []
    for state in states:
        branch = _runs_query(dag_id, [state], run_type)
        if before is not None:
            branch = branch.where(table.c.logical_date < before)
        branch = branch.order_by(*_list_order(table.c, one_dag=one_dag)).limit(reach)
        branches.append(sa.select(branch.subquery()))
    merged = sa.union_all(*branches).subquery()
    query = sa.select(merged).order_by(*_list_order(merged.c, one_dag=one_dag))
    return [_run(r) for r in _fetch(engine, _page(query, limit, offset))]


def run_dates_between(engine: Engine, dag_id: str, start: datetime, end: datetime) -> set[datetime]:
    """Logical dates (aware UTC) of a DAG's runs with start <= logical_date <= end."""
    table = t.dag_run
    query = sa.select(table.c.logical_date).where(
        table.c.dag_id == dag_id, table.c.logical_date >= start, table.c.logical_date <= end
    )
    return {row["logical_date"] for row in _fetch(engine, query)}


def count_runs(
    engine: Engine,
    dag_id: str | None = None,
    *,
    states: Iterable[str] | None = None,
    run_type: str | None = None,
) -> int:
    query = _runs_query(dag_id, states, run_type).subquery()
    with translate_errors(engine), engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(query)).scalar_one())


def get_run(engine: Engine, dag_id: str, run_id: str) -> DagRun | None:
    table = t.dag_run
    query = sa.select(table).where(table.c.dag_id == dag_id, table.c.run_id == run_id)
    rows = _fetch(engine, query)
    return _run(rows[0]) if rows else None


def run_at(engine: Engine, dag_id: str, logical_date: datetime) -> DagRun | None:
    """The DAG's run on a slot (the unique (dag_id, logical_date) index), or None."""
    table = t.dag_run
    query = sa.select(table).where(table.c.dag_id == dag_id, table.c.logical_date == logical_date)
    rows = _fetch(engine, query)
    return _run(rows[0]) if rows else None


def skipped_range(engine: Engine, dag_id: str, slot: datetime) -> SkippedSlots | None:
    """The DAG's skipped range holding ``slot`` (``SkippedSlots``), or None: the first range
    ending at or after it (its primary key), if it starts at or before it."""
    table = t.skipped_slots
    query = (
        sa.select(table)
        .where(table.c.dag_id == dag_id, table.c.last_slot >= slot)
        .order_by(table.c.last_slot)
        .limit(1)
    )
    rows = _fetch(engine, query)
    if not rows or rows[0]["first_slot"] > slot:
        return None
    row = rows[0]
    return SkippedSlots(
        row["first_slot"], row["last_slot"], int(row["slots"]), row["reason"], row["decided_at"]
    )


def oldest_run_date(engine: Engine, dag_id: str) -> datetime | None:
    """The logical date of the DAG's oldest run in the DB (the start of the same index)."""
    table = t.dag_run
    query = (
        sa.select(table.c.logical_date)
        .where(table.c.dag_id == dag_id)
        .order_by(table.c.logical_date)
        .limit(1)
    )
    rows = _fetch(engine, query)
    return rows[0]["logical_date"] if rows else None


def list_task_instances(
    engine: Engine, dag_id: str, run_id: str, *, task_id: str | None = None
) -> list[TaskAttempt]:
    """Every attempt of every task of a run (or of one task), by task_id then try_number."""
    table = t.task_instance
    query = (
        sa.select(table)
        .where(table.c.dag_id == dag_id, table.c.run_id == run_id)
        .order_by(table.c.task_id, table.c.try_number)
    )
    if task_id is not None:
        query = query.where(table.c.task_id == task_id)
    return [
        TaskAttempt(
            dag_id=r["dag_id"],
            run_id=r["run_id"],
            task_id=r["task_id"],
            try_number=r["try_number"],
            state=TaskState(r["state"]),
            worker_id=r["worker_id"],
            lease_token=r["lease_token"],
            queued_at=r["queued_at"],
            start_date=r["start_date"],
            end_date=r["end_date"],
            exit_code=r["exit_code"],
            message=r["message"],
            result_json=r.get("result_json"),
        )
        for r in _fetch(engine, query)
    ]


def read_log(
    engine: Engine,
    dag_id: str,
    run_id: str,
    task_id: str,
    try_number: int,
    *,
    after_seq: int = -1,
    limit: int = MAX_PAGE,
) -> list[LogChunk]:
    """Log chunks of one attempt with chunk_seq > ``after_seq``, in order (for tailing: pass
    the last chunk_seq seen)."""
    table = t.task_log
    query = (
        sa.select(table.c.chunk_seq, table.c.stream, table.c.text, table.c.created_at)
        .where(
            table.c.dag_id == dag_id,
            table.c.run_id == run_id,
            table.c.task_id == task_id,
            table.c.try_number == try_number,
            table.c.chunk_seq > after_seq,
        )
        .order_by(table.c.chunk_seq)
    )
    return [LogChunk(**r) for r in _fetch(engine, _page(query, limit, 0))]


def list_import_errors(engine: Engine) -> list[ImportErrorRecord]:
    table = t.import_error
    query = sa.select(table.c.fileloc, table.c.message, table.c.traceback).order_by(table.c.fileloc)
    return [ImportErrorRecord(**r) for r in _fetch(engine, query)]


def _page(query: sa.Select[Any], limit: int, offset: int) -> sa.Select[Any]:
    if limit < 0 or offset < 0:
        raise ValueError(f"limit {limit} and offset {offset} must not be negative")
    return query.limit(min(limit, MAX_PAGE)).offset(offset)


def _fetch(engine: Engine, query: sa.Select[Any]) -> list[dict[str, Any]]:
    with translate_errors(engine), engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def _run(r: dict[str, Any]) -> DagRun:
    return DagRun(
        dag_id=r["dag_id"],
        run_id=r["run_id"],
        logical_date=r["logical_date"],
        data_interval_start=r["data_interval_start"],
        data_interval_end=r["data_interval_end"],
        run_type=RunType(r["run_type"]),
        state=RunState(r["state"]),
        conf=dict(r["conf"] or {}),
        created_at=r["created_at"],
        start_date=r["start_date"],
        end_date=r["end_date"],
    )
