"""The partition checker: proves docs/architecture.md §4's invariants over a recorded ``History``.

The checks are pure functions of a ``History`` (``history.py``: the DB rows after the
cluster settled, the nodes' statuses, the digests sampled during the run, what workers
really executed), so tests feed planted histories.

The invariants, as checked here (each violation names its kind and the rows involved):

1. ``one_run_per_slot`` — for every DAG:
   * DUPLICATE: two or more ``dag_run`` rows share (dag_id, logical_date) (several run_ids
     for one slot; only possible if the unique constraint were missing).
   * GAP: a slot the timetable says is due — catchup=True, not paused, schedule not NONE,
     start_date <= logical_date <= min(end_date, ``due_until``) — has no run. ``due_until``
     is the instant up to which every slot must exist once the cluster has settled (the
     runner passes the settle time minus a few leader ticks).
   * OFF_SCHEDULE: a *scheduled* run whose logical_date is not a slot of the DAG's timetable.
2. ``one_holder_per_attempt`` and
3. ``dispatch_only_after_commit``: see ``leases.py`` (DOUBLE_HOLDER, STALE_SUCCESS, NO_TOKEN,
   DOUBLE_EXECUTION, PHANTOM_SUCCESS; TOKEN_REUSED, TOKEN_ORDER, TOKEN_BEYOND_COMMIT,
   UNCOMMITTED_EXECUTION, EXECUTED_BEFORE_LEASE; VACUOUS for both when nothing was leased).
4. ``nothing_committed_lost`` — after settling:
   * UNMATERIALIZED: DB watermark < the cluster's last outbox seq.
   * ACKED_NOT_IN_DB: a node's acked seq > DB watermark (acked means "in the DB").
   * WATERMARK_AHEAD: DB watermark > the cluster's last outbox seq, or a node's materializer
     saw a higher watermark than the DB now holds (the DB lost a commit).
   * RUN_MISSING: a run the leader's state holds is not in the DB (when supplied).
   * ORPHAN_ATTEMPT: an attempt whose run has no dag_run row.
   * NO_STATUS: no node answered, nothing can be compared.
5. ``replicas_agree`` — DIVERGED: two nodes reported different digests at the same
   digest_index (final statuses and samples taken during the run alike).

And one liveness check (not an invariant of §4, but what makes 1-3 worth checking):

6. ``due_runs_finish`` — every due scheduled run (as in GAP) reached success or failed, or
   is still legitimately running when the history was taken: one of its tasks holds an open
   lease, waits for its retry_delay, or was queued less than ``queue_grace`` ago.
   * STUCK: none of that: the run stopped making progress.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from raftsched.core.model import ScheduleKind
from raftsched.core.timetable import timetable_for
from scripts.partition.history import (
    AttemptRow,
    DigestSample,
    Execution,
    History,
    NodeStatus,
    RunRow,
    load_executions,
    load_history,
)
from scripts.partition.leases import (
    DEFAULT_TOLERANCE,
    check_dispatch_after_commit,
    check_one_holder,
)
from scripts.partition.verdict import INVARIANTS, Verdict, Violation, all_ok, format_verdicts

__all__ = [
    "INVARIANTS",
    "AttemptRow",
    "DigestSample",
    "Execution",
    "History",
    "NodeStatus",
    "RunRow",
    "Verdict",
    "Violation",
    "all_ok",
    "check",
    "check_dispatch_after_commit",
    "check_one_holder",
    "format_verdicts",
    "load_executions",
    "load_history",
]

MAX_SLOTS_PER_DAG = 1_000_000
DEFAULT_QUEUE_GRACE = timedelta(seconds=30)
FINISHED_RUN_STATES = frozenset({"success", "failed"})


def check(
    history: History,
    *,
    tolerance: timedelta = DEFAULT_TOLERANCE,
    queue_grace: timedelta = DEFAULT_QUEUE_GRACE,
    require_attempts: bool = True,
    skew: timedelta = timedelta(0),
) -> list[Verdict]:
    """Every invariant's verdict, in docs/architecture.md §4 order, then the liveness check.

    ``require_attempts``: invariants 2 and 3 FAIL as VACUOUS when no attempt was leased.
    ``skew``: the largest clock offset of the run (``faults.max_skew``), for the one check
    that compares a node's stamp with a worker's clock (see ``leases``).
    """
    return [
        check_one_run_per_slot(history),
        check_one_holder(history, tolerance=tolerance, require_attempts=require_attempts),
        check_dispatch_after_commit(
            history, tolerance=tolerance, require_attempts=require_attempts, skew=skew
        ),
        check_nothing_lost(history),
        check_replicas_agree(history),
        check_due_runs_finish(history, queue_grace=queue_grace),
    ]


# -- 1. one run per slot --------------------------------------------------------------------


def check_one_run_per_slot(h: History) -> Verdict:
    verdict = Verdict("one_run_per_slot")
    by_slot: dict[tuple[str, datetime], list[RunRow]] = defaultdict(list)
    for run in h.runs:
        by_slot[(run.dag_id, run.logical_date.astimezone(UTC))].append(run)
    for (dag_id, when), rows in sorted(by_slot.items()):
        if len(rows) > 1:
            run_ids = sorted(r.run_id for r in rows)
            verdict.add(
                "DUPLICATE",
                f"{dag_id} @ {when.isoformat()}: {len(rows)} runs {run_ids}",
                dag_id=dag_id,
                logical_date=when,
                run_ids=run_ids,
            )
    verdict.checked = len(h.runs)

    for spec in h.dags:
        if spec.schedule.kind is ScheduleKind.NONE:
            continue
        timetable = timetable_for(spec)
        scheduled = [r for r in h.runs if r.dag_id == spec.dag_id and r.run_type == "scheduled"]
        horizon = max([h.due_until, *(r.logical_date for r in scheduled)])
        slots = {s.logical_date for s in timetable.slots_between(None, horizon, MAX_SLOTS_PER_DAG)}
        if len(slots) >= MAX_SLOTS_PER_DAG:
            verdict.notes.append(f"{spec.dag_id}: slots truncated at {MAX_SLOTS_PER_DAG}")
        for run in scheduled:
            if run.logical_date.astimezone(UTC) not in slots:
                verdict.add(
                    "OFF_SCHEDULE",
                    f"{spec.dag_id} run {run.run_id} at {run.logical_date.isoformat()}"
                    " is not a slot of its schedule",
                    dag_id=spec.dag_id,
                    run_id=run.run_id,
                    logical_date=run.logical_date,
                )
        if not spec.catchup or spec.dag_id in h.paused:
            why = "paused" if spec.dag_id in h.paused else "catchup=False"
            verdict.notes.append(f"{spec.dag_id}: {why}, gaps not checked")
            continue
        have = {when for (dag_id, when) in by_slot if dag_id == spec.dag_id}
        due = sorted(s for s in slots if s <= h.due_until)
        verdict.checked += len(due)
        for when in due:
            if when not in have:
                verdict.add(
                    "GAP",
                    f"{spec.dag_id} @ {when.isoformat()}: due slot has no run",
                    dag_id=spec.dag_id,
                    logical_date=when,
                )
    return verdict


# -- 4. nothing committed is lost -----------------------------------------------------------


def check_nothing_lost(h: History) -> Verdict:
    verdict = Verdict("nothing_committed_lost")
    up = [s for s in h.statuses if s.reachable]
    if not up:
        verdict.add("NO_STATUS", "no node answered /status: the outbox cannot be compared")
    db = h.db_watermark
    if db is None:
        verdict.add("NO_WATERMARK", "the DB has no materialize_watermark row")
    lasts = [s.outbox_last_seq for s in up if s.outbox_last_seq is not None]
    if lasts and db is not None:
        last = max(lasts)
        verdict.checked += last
        if db < last:
            verdict.add(
                "UNMATERIALIZED",
                f"DB watermark {db} < cluster's last outbox seq {last}:"
                f" {last - db} committed entries never reached the DB",
                db_watermark=db,
                outbox_last_seq=last,
            )
        elif db > last:
            verdict.add(
                "WATERMARK_AHEAD",
                f"DB watermark {db} > cluster's last outbox seq {last}: the DB holds writes"
                " the cluster does not remember",
                db_watermark=db,
                outbox_last_seq=last,
            )
    for s in up:
        if db is None:
            break
        if s.outbox_acked_seq is not None and s.outbox_acked_seq > db:
            verdict.add(
                "ACKED_NOT_IN_DB",
                f"{s.node} has acked outbox seq {s.outbox_acked_seq} but the DB watermark is {db}",
                node=s.node,
                acked=s.outbox_acked_seq,
                db_watermark=db,
            )
        if s.db_watermark is not None and s.db_watermark > db:
            verdict.add(
                "WATERMARK_AHEAD",
                f"{s.node}'s materializer saw DB watermark {s.db_watermark}, the DB now holds"
                f" {db}: a committed DB write was lost",
                node=s.node,
                seen=s.db_watermark,
                db_watermark=db,
            )
    run_keys = {(r.dag_id, r.run_id) for r in h.runs}
    if h.leader_runs is not None:
        verdict.checked += len(h.leader_runs)
        for dag_id, run_id in sorted(h.leader_runs - run_keys):
            verdict.add(
                "RUN_MISSING",
                f"{dag_id}/{run_id} is in the leader's state but not in the DB",
                dag_id=dag_id,
                run_id=run_id,
            )
    orphans = sorted({(a.dag_id, a.run_id) for a in h.attempts} - run_keys)
    for dag_id, run_id in orphans:
        verdict.add(
            "ORPHAN_ATTEMPT",
            f"attempts of {dag_id}/{run_id} exist but the run has no dag_run row",
            dag_id=dag_id,
            run_id=run_id,
        )
    return verdict


# -- 5. replicas agree ----------------------------------------------------------------------


def check_replicas_agree(h: History) -> Verdict:
    verdict = Verdict("replicas_agree")
    seen: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    samples = list(h.digest_samples)
    samples += [
        DigestSample(s.node, s.digest_index, s.digest)
        for s in h.statuses
        if s.reachable and s.digest and s.digest_index is not None
    ]
    for sample in samples:
        seen[sample.digest_index][sample.digest].add(sample.node)
    for index in sorted(seen):
        by_digest = seen[index]
        nodes = set().union(*by_digest.values())
        if len(nodes) >= 2:
            verdict.checked += 1
        if len(by_digest) > 1:
            detail = {d[:16]: sorted(n) for d, n in sorted(by_digest.items())}
            verdict.add(
                "DIVERGED",
                f"at digest_index {index} nodes disagree: {detail}",
                digest_index=index,
                digests={d: sorted(n) for d, n in by_digest.items()},
            )
    if verdict.checked == 0:
        verdict.notes.append("no digest index was reported by two nodes: nothing compared")
    applied = {s.node: s.applied_index for s in h.statuses if s.reachable}
    if len(set(applied.values())) > 1:
        verdict.notes.append(f"applied indexes differ at the end (lag, not divergence): {applied}")
    return verdict


# -- 6. due runs finish ---------------------------------------------------------------------


def check_due_runs_finish(h: History, *, queue_grace: timedelta = DEFAULT_QUEUE_GRACE) -> Verdict:
    verdict = Verdict("due_runs_finish")
    now = h.taken_at or datetime.now(UTC)
    latest: dict[tuple[str, str], dict[str, AttemptRow]] = defaultdict(dict)
    for a in sorted(h.attempts, key=lambda a: a.try_number):
        latest[(a.dag_id, a.run_id)][a.task_id] = a  # the highest try is the task's state
    due_dags = {
        s.dag_id
        for s in h.dags
        if s.schedule.kind is not ScheduleKind.NONE and s.dag_id not in h.paused
    }
    states: dict[str, int] = defaultdict(int)
    for run in h.runs:
        if run.dag_id not in due_dags or run.run_type != "scheduled":
            continue
        if run.logical_date > h.due_until:
            continue
        verdict.checked += 1
        if run.state in FINISHED_RUN_STATES:
            states[run.state] += 1
            continue
        tasks = latest.get((run.dag_id, run.run_id), {})
        why = _in_progress(tasks.values(), now, queue_grace)
        if why:
            states["in progress"] += 1
            continue
        summary = {t: a.state for t, a in sorted(tasks.items())}
        verdict.add(
            "STUCK",
            f"{run.dag_id}/{run.run_id} is {run.state} with no task leased, retrying or"
            f" recently queued: {summary or 'no task rows'}",
            dag_id=run.dag_id,
            run_id=run.run_id,
            tasks=summary,
        )
    if verdict.checked:
        verdict.notes.append(", ".join(f"{n} {state}" for state, n in sorted(states.items())))
    else:
        verdict.notes.append("no due scheduled run: nothing to finish")
    return verdict


def _in_progress(tasks: Iterable[AttemptRow], now: datetime, grace: timedelta) -> str:
    for a in tasks:
        if a.state == "running" and a.end_date is None:
            return "leased"
        if a.state == "up_for_retry":
            return "retrying"
        if a.state == "queued" and a.queued_at is not None and a.queued_at >= now - grace:
            return "queued"
        if a.state == "deferred" and a.end_date is not None and a.end_date >= now - grace:
            return "deferred"  # waits on its trigger (pt_deferred's are due within seconds)
    return ""
