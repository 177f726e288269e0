"""Rebuild the replicated state from the metadata DB (``raftsched cluster rebuild --from-db``).

When every journal is lost (or refused: the DB and the log disagree, see
``cluster.materializer_driver``), the DB's history is the truth. :func:`build_state` reads it
and returns a ``SchedulerState`` snapshot dict (the versioned ``snapshot()``/``restore()``
format of ``core.state``) plus the Raft index the new log starts at:

- DAGs with their specs, paused and active flags; each DAG's last scheduled logical date is
  the latest ``scheduled`` run in the DB, so the scheduler goes on from the next slot (a
  ``catchup=True`` DAG runs every slot after it: none twice, none skipped).
- Runs still active, with their task instances (the latest attempt row of each task).
  An attempt that was RUNNING is lost with the old cluster: its row is closed as FAILED
  ("lost in a cluster rebuild") and the task becomes UP_FOR_RETRY at once (it gets one more
  try, so the rebuild never uses up a retry); QUEUED, UP_FOR_RETRY and NONE tasks stay so.
  Finished runs ended within the retention window, and finished manual runs on slots the
  scheduler has yet to reach, are kept too (what the live state keeps); finished runs of the
  last hour are remembered as taken slots (``evicted_slots``).
- Each DAG's newest skipped-slot ranges (``rebuild_extras.read_skipped``); the schedule
  goes on after the newest run or skipped range, whichever is later. A paused DAG's pause
  began, at the latest, when its row last changed (a ``paused`` gap from then).
- Import errors are empty (the leader parses the DAG folder again).
- Variables and connections come back from the ``secret`` table, ciphertext as it was in the
  log (never decrypted here). Callback jobs come back from ``callback_job``: every open one
  (pending, or leased: its lease runs out as it would have, and the job is leasable again),
  finished ones of the last hour (so a repeat of their event stays a no-op), and the creation
  counter past every job the DB saw (a new job's log chunks never meet an old one's). A
  deadline job of a kept run marks that run alerted.
- Pools come back from the ``pool`` table (slots in use are derived from running tasks: none).
  Asset events: the next id, each asset's newest events, client event ids (``rebuild_assets``).
- The outbox continues the DB: ``acked_seq = last_seq = watermark``, so the first new entry
  is ``watermark + 1``; the rows that close lost attempts are its first entries.
- Fencing tokens are Raft log indices. The new log starts at ``base_index`` =
  max(highest lease token in ``task_instance``, highest commit index a node reported in
  ``node_heartbeat``, watermark) + ``INDEX_MARGIN``: every lease the new cluster grants has a
  token above every token the old cluster could have granted (leases it granted but never
  materialized included: it would have had to commit a million entries past the last commit
  index its nodes wrote to the DB, which they do every few seconds), so a worker still
  holding an old token is refused. That index is the new cluster epoch.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from raftsched.core.model import DagSpec, utc_iso
from raftsched.core.snapshot import SCHEMA_VERSION
from raftsched.store import rebuild_extras as rx
from raftsched.store import tables as t
from raftsched.store.rebuild_assets import read_assets, run_events, watcher_triggers

log = logging.getLogger(__name__)

INDEX_MARGIN = 1_000_000
SLOT_MEMORY = timedelta(hours=1)  # core: evicted slots are remembered this long
LOST_MESSAGE = "attempt lost: the cluster was rebuilt from the metadata DB (cluster rebuild)"
_ACTIVE_RUN = ("queued", "running")
_FINISHED_RUN = ("success", "failed")
_ATTEMPT = ("running", "success", "failed")
_CHUNK = 400


@dataclass
class RebuildPlan:
    state: dict[str, Any]  # SchedulerState.snapshot() format
    base_index: int  # the new log's first index (the snapshot's index); the epoch
    watermark: int
    counts: dict[str, int] = field(default_factory=dict)


def _iso(value: datetime | None) -> str | None:
    return utc_iso(value) if value is not None else None


def read_watermark(conn: sa.Connection) -> int:
    seq = conn.execute(sa.select(t.materialize_watermark.c.seq)).scalar()
    return int(seq or 0)


def highest_index(conn: sa.Connection) -> int:
    """The highest Raft index the DB saw: lease tokens and the nodes' reported commits."""
    token = conn.execute(sa.select(sa.func.max(t.task_instance.c.lease_token))).scalar()
    commit = conn.execute(sa.select(sa.func.max(t.node_heartbeat.c.commit_index))).scalar()
    return max(int(token or 0), int(commit or 0))


def build_state(
    engine: sa.Engine,
    *,
    now: datetime | None = None,
    run_retention_sec: float = 600.0,
) -> RebuildPlan:
    now = (now or datetime.now(UTC)).astimezone(UTC)
    with engine.connect() as conn:
        watermark = read_watermark(conn)
        base_index = max(highest_index(conn), watermark) + INDEX_MARGIN
        specs, dags = _dags(conn)
        last_sched = _last_scheduled(conn)
        skipped = rx.read_skipped(conn)
        for dag in dags:
            last = last_sched.get(dag["dag_id"])
            kept = skipped.get(dag["dag_id"])
            if kept:  # the schedule went on past its newest skipped range too
                dag["skipped"] = kept
                newest = datetime.fromisoformat(kept[-1]["last"])
                last = newest if last is None else max(last, newest)
            dag["last_logical_date"] = _iso(last)
        runs = _runs(conn, now, run_retention_sec, last_sched, set(specs_by_dag(dags)))
        tis = _latest_attempts(conn, [(r.dag_id, r.run_id) for r in runs])
        slots = _recent_slots(conn, now, {(r.dag_id, r.run_id) for r in runs})
        secrets = rx.read_secrets(conn)
        pools = rx.read_pools(conn)
        audit = rx.read_audit(conn)
        assets = read_assets(conn)
        carried = run_events(
            conn, [(r.dag_id, r.run_id) for r in runs if r.run_type == "asset_triggered"]
        )
        callbacks = rx.read_callbacks(conn, now, {(r.dag_id, r.run_id) for r in runs})
    spec_of = specs_by_dag(dags)
    outbox: list[list[Any]] = []
    counts = defaultdict(int)
    run_dicts = []
    for run in runs:
        spec_hash = spec_of[run.dag_id]
        spec = specs[spec_hash]
        ti_list = []
        for task in spec["tasks"]:
            row = tis.get((run.dag_id, run.run_id, task["task_id"]))
            ti, closing = _task_instance(task, row, now)
            ti_list.append(ti)
            if closing is not None:
                outbox.append([watermark + len(outbox) + 1, "task_instance", closing])
                counts["attempts_lost"] += 1
            counts[f"tasks_{ti['state']}"] += 1
        run_dicts.append(
            {
                "dag_id": run.dag_id,
                "run_id": run.run_id,
                "logical_date": _iso(run.logical_date),
                "data_interval_start": _iso(run.data_interval_start),
                "data_interval_end": _iso(run.data_interval_end),
                "run_type": run.run_type,
                "state": run.state,
                "conf": dict(run.conf or {}),
                "created_at": _iso(run.created_at),
                "start_date": _iso(run.start_date),
                "end_date": _iso(run.end_date),
                "spec_hash": spec_hash,
                "row_seq": watermark,
                "tis": ti_list,
                **(
                    {"asset_events_json": carried[(run.dag_id, run.run_id)]}
                    if (run.dag_id, run.run_id) in carried
                    else {}
                ),
            }
        )
        counts["runs_active" if run.state in _ACTIVE_RUN else "runs_finished_kept"] += 1
    counts["dags"] = len(dags)
    counts["slots_remembered"] = len(slots)
    counts["secrets"] = len(secrets)
    counts["pools"] = len(pools)
    if callbacks is not None:
        counts["callbacks_open"] = len(callbacks["open"])
    state = {
        "schema_version": SCHEMA_VERSION,
        "applied_index": base_index,
        "specs": specs,
        "dags": dags,
        "runs": run_dicts,
        "import_errors": [],
        "outbox": {
            "acked_seq": watermark,
            "last_seq": watermark + len(outbox),
            "entries": outbox,
        },
        "dedup": [],
        "halted": None,
        "evicted_slots": slots,
        "fences": [],
    }
    if secrets:
        state["secrets"] = secrets
    if callbacks is not None:
        state["callbacks"] = callbacks
    if audit:
        state["audit"] = audit
    if pools:
        state["pools"] = pools
    if assets is not None:
        state["assets"] = assets
    if (watchers := watcher_triggers(specs, dags, now)) is not None:
        state["triggers"] = watchers
    return RebuildPlan(state=state, base_index=base_index, watermark=watermark, counts=dict(counts))


def specs_by_dag(dags: list[dict[str, Any]]) -> dict[str, str]:
    return {d["dag_id"]: d["spec_hash"] for d in dags}


def _dags(conn: sa.Connection) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    specs: dict[str, dict[str, Any]] = {}
    dags: list[dict[str, Any]] = []
    for row in conn.execute(sa.select(t.dags).order_by(t.dags.c.dag_id)):
        try:
            spec = DagSpec.from_dict(dict(row.spec))
        except Exception as err:  # a row the DB holds but this release cannot read
            log.warning("DAG %s: spec unreadable (%s): left out", row.dag_id, err)
            continue
        spec_hash = spec.spec_hash or spec.compute_hash()
        data = spec.to_dict()
        data["spec_hash"] = spec_hash
        specs[spec_hash] = data
        dags.append(
            {
                "dag_id": row.dag_id,
                "spec_hash": spec_hash,
                "paused": bool(row.paused),
                "active": bool(row.active),
                "updated_at": _iso(row.updated_at),
                "last_logical_date": None,
            }
        )
        if row.paused and row.updated_at is not None:
            # paused since its row last changed, at the latest (core/skip_causes.py): explain
            # says since when, and the slots it misses from then on are "paused"
            dags[-1]["gaps"] = [{"cause": "paused", "start": _iso(row.updated_at)}]
    return specs, dags


def _last_scheduled(conn: sa.Connection) -> dict[str, datetime]:
    r = t.dag_run
    query = (
        sa.select(r.c.dag_id, sa.func.max(r.c.logical_date))
        .where(r.c.run_type == "scheduled")
        .group_by(r.c.dag_id)
    )
    out = {}
    for dag_id, last in conn.execute(query):
        if last is not None:
            out[dag_id] = _aware(last)
    return out


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _runs(
    conn: sa.Connection,
    now: datetime,
    retention: float,
    last_sched: dict[str, datetime],
    known: set[str],
) -> list[Any]:
    r = t.dag_run
    cutoff = now - timedelta(seconds=retention)
    query = (
        sa.select(r)
        .where(
            sa.or_(
                r.c.state.in_(_ACTIVE_RUN),
                r.c.end_date >= cutoff,
                r.c.run_type != "scheduled",
            )
        )
        .order_by(r.c.dag_id, r.c.logical_date)
    )
    runs = []
    for row in conn.execute(query):
        if row.dag_id not in known:
            log.warning("run %s/%s: its DAG is not in the DB: left out", row.dag_id, row.run_id)
            continue
        ended_recently = row.end_date is not None and _aware(row.end_date) >= cutoff
        if row.state not in _ACTIVE_RUN and not ended_recently:
            last = last_sched.get(row.dag_id)
            if last is not None and _aware(row.logical_date) <= last:
                continue  # a finished manual run on a slot the scheduler has passed
        runs.append(row)
    return runs


def _latest_attempts(
    conn: sa.Connection, keys: list[tuple[str, str]]
) -> dict[tuple[str, str, str], Any]:
    ti = t.task_instance
    out: dict[tuple[str, str, str], Any] = {}
    for i in range(0, len(keys), _CHUNK):
        chunk = keys[i : i + _CHUNK]
        query = sa.select(ti).where(sa.tuple_(ti.c.dag_id, ti.c.run_id).in_(chunk))
        for row in conn.execute(query):
            key = (row.dag_id, row.run_id, row.task_id)
            seen = out.get(key)
            if seen is None or row.try_number > seen.try_number:
                out[key] = row
    return out


def _recent_slots(
    conn: sa.Connection, now: datetime, kept: set[tuple[str, str]]
) -> list[list[str | None]]:
    r = t.dag_run
    since = now - SLOT_MEMORY
    query = (
        sa.select(r.c.dag_id, r.c.run_id, r.c.logical_date, r.c.end_date)
        .where(r.c.state.in_(_FINISHED_RUN), r.c.end_date >= since)
        .order_by(r.c.end_date)
    )
    return [
        [row.dag_id, _iso(_aware(row.logical_date)), _iso(_aware(row.end_date))]
        for row in conn.execute(query)
        if (row.dag_id, row.run_id) not in kept
    ]


def _task_instance(
    task: dict[str, Any], row: Any, now: datetime
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the snapshot dict of one task instance, the row closing a lost attempt or None)."""
    base_tries = max(0, int(task.get("retries", 0))) + 1
    ti: dict[str, Any] = {
        "task_id": task["task_id"],
        "state": "none",
        "try_number": 0,
        "max_tries": base_tries,
        "lease": None,
        "next_retry_at": None,
        "queued_at": None,
        "start_date": None,
        "end_date": None,
        "exit_code": None,
        "message": "",
        "log_chunks": 0,
        "worker_id": None,
        "lease_token": None,
    }
    if row is None:
        return ti, None
    state = str(row.state)
    closing = None
    # lost with the old cluster (a deferred one's trigger lived only in the replicated state):
    # closed, and tried again at once (a deferring task defers anew)
    if state in ("running", "deferred"):
        number = int(row.try_number)
        closing = {
            "dag_id": row.dag_id,
            "run_id": row.run_id,
            "task_id": row.task_id,
            "try_number": number,
            "state": "failed",
            "worker_id": row.worker_id,
            "lease_token": row.lease_token,
            "queued_at": _iso(row.queued_at),
            "start_date": _iso(row.start_date),
            "end_date": utc_iso(now),
            "exit_code": None,
            "message": LOST_MESSAGE,
        }
        ti.update(
            state="up_for_retry",
            try_number=number,
            max_tries=max(base_tries, number + 1),
            next_retry_at=utc_iso(now),
            message=LOST_MESSAGE,
        )
        return ti, closing
    if state in _ATTEMPT:  # success, failed: this attempt is the task's last
        ti.update(
            state=state,
            try_number=int(row.try_number),
            max_tries=max(base_tries, int(row.try_number)),
            queued_at=_iso(row.queued_at),
            start_date=_iso(row.start_date),
            end_date=_iso(row.end_date),
            exit_code=row.exit_code,
            message=row.message or "",
            worker_id=row.worker_id,
            lease_token=row.lease_token,
        )
        if state == "success" and getattr(row, "result_json", None):  # its XCom
            ti["result_json"] = row.result_json
        return ti, None
    # none, queued, up_for_retry, upstream_failed, skipped: the row is the attempt to come
    number = max(0, int(row.try_number) - 1)
    ti.update(state=state, try_number=number, max_tries=max(base_tries, number + 1))
    if state == "queued":
        ti["queued_at"] = _iso(row.queued_at) or utc_iso(now)
    elif state == "up_for_retry":
        ti["next_retry_at"] = utc_iso(now)
    elif state in ("upstream_failed", "skipped"):
        ti["end_date"] = _iso(row.end_date) or utc_iso(now)
    ti["message"] = row.message or ""
    return ti, closing
