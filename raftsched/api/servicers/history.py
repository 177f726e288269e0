"""Live state merged with DB history: runs pages, recent runs, attempts, next runs, page tokens.

The replicated state holds active runs and finished ones until they are materialized and past
retention; the metadata DB holds every run the materializer wrote. A run known to both is
taken from the live state (it is at least as fresh). Pure functions over already-read data,
plus the paged DB reads; no gRPC here.

Two caches keep a DAG list page from costing a DB query and a timetable walk per DAG:

- :class:`NextRunCache`: a DAG's next run depends only on its record and on which slot
  ``now`` is in; kept until the next slot time passes or the record changes.
- :class:`RecentRunsCache`: a DAG's newest DB runs, kept while the read view's
  ``outbox_acked_seq`` stays the same. Why that is exact: every row with seq <= that ack was
  in the DB before the view saw the ack, hence before the cached query; a row written after
  the query has a later seq, so its run is not materialized up to its last change, so it is
  still live in every view with that ack, and the live run wins the merge anyway.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from raftsched.api.status import invalid_argument
from raftsched.core import limits
from raftsched.core.model import DagRecord, DagRun, TaskState
from raftsched.core.slot_policy import runs_left
from raftsched.core.timetable import Slot, timetable_for
from raftsched.store import queries

RunKey = tuple[float, str, str]  # (-logical_date timestamp, dag_id, run_id): the list order
DB_CHUNK = 200
MAX_TOKEN_CHARS = 16_384  # base64 of [date, dag_id, run_id] (JSON-escaped ids)
_US = timedelta(microseconds=1)


def run_order(run: DagRun) -> RunKey:
    return (-run.logical_date.timestamp(), run.dag_id, run.run_id)


# -- page tokens ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCursor:
    logical_date: datetime
    dag_id: str
    run_id: str

    @property
    def order(self) -> RunKey:
        return (-self.logical_date.timestamp(), self.dag_id, self.run_id)

    def encode(self) -> str:
        raw = json.dumps([self.logical_date.isoformat(), self.dag_id, self.run_id])
        return base64.urlsafe_b64encode(raw.encode()).decode()

    @classmethod
    def decode(cls, token: str) -> RunCursor | None:
        if not token:
            return None
        try:
            if len(token) > MAX_TOKEN_CHARS or not token.isascii():
                raise ValueError("too long")
            date, dag_id, run_id = json.loads(base64.urlsafe_b64decode(token.encode()))
            parsed = datetime.fromisoformat(date)
            if parsed.tzinfo is None:
                raise ValueError("naive")
            # In range (the cursor's date gets a microsecond added) and ids as stored.
            limits.check_datetime("page_token", parsed)
            limits.check_id("page_token", dag_id)
            limits.check_id("page_token", run_id)
            return cls(parsed, str(dag_id), str(run_id))
        except (ValueError, TypeError, OverflowError, binascii.Error, json.JSONDecodeError):
            raise invalid_argument(
                "page_token", token, "not a token from a previous ListRuns answer"
            ) from None

    @classmethod
    def of(cls, run: DagRun) -> RunCursor:
        return cls(run.logical_date, run.dag_id, run.run_id)


# -- runs -----------------------------------------------------------------------------------


def db_runs_after(
    engine: Any,
    cursor: RunCursor | None,
    need: int,
    *,
    dag_id: str | None,
    states: Sequence[str] | None,
    run_type: str | None,
) -> tuple[list[DagRun], bool]:
    """Up to ``need`` DB runs after ``cursor`` in list order; and whether more may exist."""
    out: list[DagRun] = []
    before = cursor.logical_date + _US if cursor is not None else None
    offset = 0
    while len(out) < need:
        rows = queries.list_runs(
            engine,
            dag_id,
            states=states,
            run_type=run_type,
            before=before,
            limit=DB_CHUNK,
            offset=offset,
        )
        for run in rows:
            if cursor is None or run_order(run) > cursor.order:
                out.append(run)
        if len(rows) < DB_CHUNK:
            return out[:need], len(out) > need
        offset += DB_CHUNK
    return out[:need], True


def merge_runs(
    db_runs: Iterable[DagRun],
    live_runs: Iterable[DagRun],
    *,
    cursor: RunCursor | None,
    keep: Callable[[DagRun], bool],
) -> list[DagRun]:
    """DB runs overlaid with live ones (by dag_id, run_id), filtered, after ``cursor``, in
    list order."""
    merged: dict[tuple[str, str], DagRun] = {(r.dag_id, r.run_id): r for r in db_runs}
    for run in live_runs:
        merged[(run.dag_id, run.run_id)] = run
    out = [
        run
        for run in merged.values()
        if keep(run) and (cursor is None or run_order(run) > cursor.order)
    ]
    out.sort(key=run_order)
    return out


def recent_runs(
    engine: Any | None, dag_id: str, live: Iterable[DagRun], count: int
) -> list[DagRun]:
    """The ``count`` newest runs of a DAG, live and history (DB errors: live only)."""
    db: list[DagRun] = []
    if engine is not None and count > 0:
        db = queries.list_runs(engine, dag_id, limit=count)
    return merge_runs(db, live, cursor=None, keep=lambda _run: True)[:count]


def newest_merged(
    db_newest: Iterable[DagRun],
    live_newest: Sequence[DagRun],
    live_run: Callable[[str, str], DagRun | None],
    count: int,
) -> list[DagRun]:
    """The ``count`` newest runs from a DAG's ``count`` newest DB rows and its live runs in
    list order (only the first ``count`` are looked at): a DB row of a live run is replaced
    by ``live_run(dag_id, run_id)``, so the page costs O(count) however many runs are live."""
    db = [live_run(r.dag_id, r.run_id) or r for r in db_newest]
    return merge_runs(db, live_newest[:count], cursor=None, keep=lambda _run: True)[:count]


class RecentRunsCache:
    """dag_id -> its newest DB runs, valid while the read view's ``outbox_acked_seq`` is the
    one they were read at (see the module docstring), and at most :attr:`TTL` s (rows that
    something other than the materializer changed). Thread-safe."""

    TTL = 30.0
    MAX_ENTRIES = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[int, int, float, list[DagRun]]] = {}

    def get(self, engine: Any, dag_id: str, count: int, acked_seq: int) -> list[DagRun]:
        if count <= 0:
            return []
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(dag_id)
        if entry is not None:
            seq, held, at, rows = entry
            if seq == acked_seq and held >= count and now - at < self.TTL:
                return rows[:count]
        rows = queries.list_runs(engine, dag_id, limit=count)
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
            self._entries[dag_id] = (acked_seq, count, now, rows)
        return rows


class NextRunCache:
    """dag_id -> :func:`next_run`, kept while the record is the same object (records are
    frozen: any change replaces it) and ``now`` is before the next slot time. Thread-safe."""

    MAX_ENTRIES = 100_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[DagRecord, datetime | None, Slot | None]] = {}

    def get(self, record: DagRecord, now: datetime) -> Slot | None:
        dag_id = record.spec.dag_id
        with self._lock:
            entry = self._entries.get(dag_id)
        if entry is not None and entry[0] is record and (entry[1] is None or now < entry[1]):
            return entry[2]
        value = next_run(record, now)
        until = _next_change(record, now)
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.clear()
            self._entries[dag_id] = (record, until, value)
        return value


def _next_change(record: DagRecord, now: datetime) -> datetime | None:
    """When :func:`next_run` of ``record`` may change with time (None: never)."""
    if record.paused or not record.active or record.spec.catchup:
        return None  # None either way, or next_slot(last): independent of now
    try:
        when = timetable_for(record.spec).next_time(now)
    except ValueError:
        return None
    return when


# -- DAGs -----------------------------------------------------------------------------------


def next_run(record: DagRecord, now: datetime) -> Slot | None:
    """The DAG's next scheduled slot as the leader would create it; None when paused,
    inactive, unscheduled, past its end or done with its max_runs."""
    if record.paused or not record.active:
        return None
    if runs_left(record.spec, record.scheduled_runs) == 0:
        return None
    try:
        table = timetable_for(record.spec)
    except ValueError:
        return None
    last = record.last_logical_date
    if record.spec.catchup:
        return table.next_slot(last)
    latest = table.latest_slot(now)
    if latest is not None and (last is None or latest.logical_date > last):
        return latest
    return table.next_slot(max(last, now) if last is not None else now)


def matches(record: DagRecord, request: Any) -> bool:
    """Whether a DAG passes ListDags' filter (search, tags, paused, include_inactive)."""
    spec = record.spec
    if not record.active and not request.include_inactive:
        return False
    if request.HasField("paused") and record.paused != request.paused:
        return False
    if request.tags and not set(request.tags) <= set(spec.tags):
        return False
    if request.search:
        needle = request.search.lower()
        return needle in spec.dag_id.lower() or needle in spec.description.lower()
    return True


# -- attempts -------------------------------------------------------------------------------


def attempt_row(ti: Any) -> int:
    """The DB row (try_number) a live task instance writes: its running or finished attempt,
    or, before an attempt starts (none, queued, up_for_retry, ...), the coming one."""
    started = ti.state in (TaskState.RUNNING, TaskState.SUCCESS, TaskState.FAILED)
    return int(ti.try_number) if started else int(ti.try_number) + 1


def merge_attempts(db_rows: Iterable[Any], live: Iterable[Any]) -> list[tuple[str, int, Any]]:
    """(task_id, try_number, row-or-TI) for every attempt: DB rows, with the live task
    instance replacing the row of its current attempt (and standing for a task not run yet)."""
    merged: dict[tuple[str, int], Any] = {(r.task_id, r.try_number): r for r in db_rows}
    for ti in live:
        merged[(ti.key.task_id, attempt_row(ti))] = ti
    return [(task_id, tn, value) for (task_id, tn), value in sorted(merged.items())]
