"""The partition checker: proves the invariants of DESIGN.md §4 over a recorded ``History``.

A ``History`` is plain data: the DAG specs, the ``dag_run`` and ``task_instance`` rows read
from the metadata DB after the cluster settled, the DB watermark, every node's ``/status``
(and digests sampled during the run), optionally what workers really executed. The checks
are pure functions of it, so tests feed planted histories. ``load_history`` reads one from a
live DB.

The invariants, as checked here (each violation names its kind and the rows involved):

1. ``one_run_per_slot`` — for every DAG:
   * DUPLICATE: two or more ``dag_run`` rows share (dag_id, logical_date) (several run_ids
     for one slot; only possible if the unique constraint were missing).
   * GAP: a slot the timetable says is due — catchup=True, not paused, schedule not NONE,
     start_date <= logical_date <= min(end_date, ``due_until``) — has no run. ``due_until``
     is the instant up to which every slot must exist once the cluster has settled (the
     runner passes the settle time minus a few leader ticks).
   * OFF_SCHEDULE: a *scheduled* run whose logical_date is not a slot of the DAG's timetable.
2. ``one_holder_per_attempt`` — for the attempts of one task key (dag_id, run_id, task_id)
   ordered by start_date (the commit time of their lease), and for every pair a < b:
   * DOUBLE_HOLDER: b was leased while a had not been fenced: a has no end_date (still open:
     never expired, completed or revoked) or b.start_date < a.end_date - ``tolerance``. The
     state machine re-leases a task only after its previous attempt ended, and both
     timestamps are stamped by the proposers of committed commands, so in a correct history
     a.end_date <= b.start_date (``tolerance`` absorbs proposer clock jitter only).
   * STALE_SUCCESS: the same, where a ended in success: an outcome was accepted from a token
     that had already been superseded.
   * NO_TOKEN: an attempt names a worker but carries no lease token.
   * DOUBLE_EXECUTION (only with worker execution records): two executions of one task key
     under different tokens overlap in real time by more than ``tolerance``: the holder of the
     older token kept running after the newer lease began.
3. ``dispatch_only_after_commit`` — approximated from the rows (a minority leader cannot
   commit, so anything it decided would have to show up as out of log order):
   * TOKEN_REUSED: two attempts of one task key carry the same token.
   * TOKEN_ORDER: tokens are not strictly increasing with try_number.
   * TOKEN_BEYOND_COMMIT: a token greater than the highest commit index any node reports.
   * UNCOMMITTED_EXECUTION: a worker executed a (task, token) that no committed attempt has.
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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from raftsched.core.model import DagSpec, ScheduleKind
from raftsched.core.timetable import timetable_for

MAX_SLOTS_PER_DAG = 1_000_000
DEFAULT_TOLERANCE = timedelta(milliseconds=500)

INVARIANTS: dict[str, str] = {
    "one_run_per_slot": "1. one run per schedule slot",
    "one_holder_per_attempt": "2. one holder per attempt",
    "dispatch_only_after_commit": "3. dispatch only after commit",
    "nothing_committed_lost": "4. nothing committed is lost",
    "replicas_agree": "5. replicas agree",
}


# -- the history ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRow:
    dag_id: str
    run_id: str
    logical_date: datetime
    run_type: str = "scheduled"
    state: str = "queued"


@dataclass(frozen=True, slots=True)
class AttemptRow:
    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    state: str
    worker_id: str | None = None
    lease_token: int | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.dag_id, self.run_id, self.task_id)


@dataclass(frozen=True, slots=True)
class Execution:
    """What a worker really ran (from the workload's own side-effect log)."""

    dag_id: str
    run_id: str
    task_id: str
    token: int
    worker_id: str
    started_at: datetime
    ended_at: datetime | None  # None: still running when the history was taken

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.dag_id, self.run_id, self.task_id)


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """The fields of a node's ``GET /status`` the checker uses; ``reachable=False``: no answer."""

    node: str
    reachable: bool = True
    role: str | None = None
    term: int | None = None
    leader: str | None = None
    commit_index: int | None = None
    applied_index: int | None = None
    digest: str | None = None
    digest_index: int | None = None
    outbox_last_seq: int | None = None
    outbox_acked_seq: int | None = None
    db_watermark: int | None = None

    @classmethod
    def from_json(cls, node: str, data: Mapping[str, Any] | None) -> NodeStatus:
        if data is None:
            return cls(node, reachable=False)

        def num(name: str) -> int | None:
            value = data.get(name)
            return None if value is None else int(value)

        return cls(
            node=node,
            role=data.get("role"),
            term=num("term"),
            leader=data.get("leader"),
            commit_index=num("commit_index"),
            applied_index=num("applied_index"),
            digest=data.get("digest"),
            digest_index=num("digest_index"),
            outbox_last_seq=num("outbox_last_seq"),
            outbox_acked_seq=num("outbox_acked_seq"),
            db_watermark=num("db_watermark"),
        )


@dataclass(frozen=True, slots=True)
class DigestSample:
    node: str
    digest_index: int
    digest: str


@dataclass
class History:
    dags: Sequence[DagSpec]
    runs: Sequence[RunRow]
    attempts: Sequence[AttemptRow]
    statuses: Sequence[NodeStatus]
    db_watermark: int | None
    due_until: datetime
    paused: frozenset[str] = frozenset()
    executions: Sequence[Execution] = ()
    digest_samples: Sequence[DigestSample] = ()
    leader_runs: frozenset[tuple[str, str]] | None = None  # (dag_id, run_id), when known


# -- verdicts -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Verdict:
    invariant: str
    checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def title(self) -> str:
        return INVARIANTS[self.invariant]

    def add(self, kind: str, detail: str, **data: Any) -> None:
        self.violations.append(Violation(kind, detail, {k: _plain(v) for k, v in data.items()}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "title": self.title,
            "verdict": "PASS" if self.ok else "FAIL",
            "checked": self.checked,
            "notes": list(self.notes),
            "violations": [asdict(v) for v in self.violations],
        }


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, tuple | list | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def check(history: History, *, tolerance: timedelta = DEFAULT_TOLERANCE) -> list[Verdict]:
    """Every invariant's verdict, in DESIGN.md §4 order."""
    return [
        check_one_run_per_slot(history),
        check_one_holder(history, tolerance=tolerance),
        check_dispatch_after_commit(history),
        check_nothing_lost(history),
        check_replicas_agree(history),
    ]


def all_ok(verdicts: Iterable[Verdict]) -> bool:
    return all(v.ok for v in verdicts)


def format_verdicts(verdicts: Iterable[Verdict], *, max_details: int = 10) -> str:
    lines = []
    for v in verdicts:
        lines.append(
            f"{'PASS' if v.ok else 'FAIL'}  {v.title}  (checked {v.checked},"
            f" violations {len(v.violations)})"
        )
        lines += [f"      note: {note}" for note in v.notes]
        for violation in v.violations[:max_details]:
            lines.append(f"      {violation.kind}: {violation.detail}")
        if len(v.violations) > max_details:
            lines.append(f"      ... and {len(v.violations) - max_details} more")
    return "\n".join(lines)


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


# -- 2. one holder per attempt --------------------------------------------------------------


def _by_key(attempts: Iterable[AttemptRow]) -> dict[tuple[str, str, str], list[AttemptRow]]:
    grouped: dict[tuple[str, str, str], list[AttemptRow]] = defaultdict(list)
    for attempt in attempts:
        grouped[attempt.key].append(attempt)
    for rows in grouped.values():
        rows.sort(key=lambda a: a.try_number)
    return grouped


def _name(a: AttemptRow) -> str:
    return f"{a.dag_id}/{a.run_id}/{a.task_id} try {a.try_number} (token {a.lease_token})"


def check_one_holder(h: History, *, tolerance: timedelta = DEFAULT_TOLERANCE) -> Verdict:
    verdict = Verdict("one_holder_per_attempt", checked=len(h.attempts))
    for rows in _by_key(h.attempts).values():
        for a in rows:
            if a.worker_id is not None and a.lease_token is None:
                verdict.add(
                    "NO_TOKEN", f"{_name(a)} names worker {a.worker_id} but has no lease token"
                )
        held = sorted((a for a in rows if a.start_date is not None), key=_started)
        for i, old in enumerate(held):
            for new in held[i + 1 :]:
                assert new.start_date is not None
                if old.end_date is not None and new.start_date >= old.end_date - tolerance:
                    continue
                still = "still open" if old.end_date is None else f"ended {old.end_date}"
                kind = "STALE_SUCCESS" if old.state == "success" else "DOUBLE_HOLDER"
                verdict.add(
                    kind,
                    f"{_name(new)} leased to {new.worker_id} at {new.start_date} while"
                    f" {_name(old)} on {old.worker_id} was not fenced ({old.state}, {still})",
                    older=asdict(old),
                    newer=asdict(new),
                )

    executions: dict[tuple[str, str, str], list[Execution]] = defaultdict(list)
    for ex in h.executions:
        executions[ex.key].append(ex)
    for runs in executions.values():
        runs.sort(key=lambda e: e.started_at)
        for i, old in enumerate(runs):
            for new in runs[i + 1 :]:
                if new.token == old.token:
                    continue
                old_end = old.ended_at or datetime.max.replace(tzinfo=UTC)
                if old_end - tolerance > new.started_at:
                    verdict.add(
                        "DOUBLE_EXECUTION",
                        f"{'/'.join(old.key)}: token {old.token} on {old.worker_id} ran until"
                        f" {old.ended_at} after token {new.token} started on {new.worker_id}"
                        f" at {new.started_at}",
                        older=asdict(old),
                        newer=asdict(new),
                    )
    verdict.checked += len(h.executions)
    return verdict


def _started(a: AttemptRow) -> datetime:
    assert a.start_date is not None
    return a.start_date


# -- 3. dispatch only after commit ----------------------------------------------------------


def check_dispatch_after_commit(h: History) -> Verdict:
    verdict = Verdict("dispatch_only_after_commit", checked=len(h.attempts))
    commits = [s.commit_index for s in h.statuses if s.reachable and s.commit_index is not None]
    highest_commit = max(commits) if commits else None
    if highest_commit is None:
        verdict.notes.append("no commit index known: TOKEN_BEYOND_COMMIT not checked")
    committed: set[tuple[tuple[str, str, str], int]] = set()
    for key, rows in _by_key(h.attempts).items():
        seen: dict[int, AttemptRow] = {}
        previous: AttemptRow | None = None
        for a in rows:
            if a.lease_token is None:
                continue
            committed.add((key, a.lease_token))
            if a.lease_token in seen:
                verdict.add(
                    "TOKEN_REUSED",
                    f"{_name(a)} reuses the token of try {seen[a.lease_token].try_number}",
                    attempts=[asdict(seen[a.lease_token]), asdict(a)],
                )
            seen[a.lease_token] = a
            if (
                previous is not None
                and previous.lease_token is not None
                and a.lease_token < previous.lease_token
            ):
                verdict.add(
                    "TOKEN_ORDER",
                    f"{_name(a)} has a lower token than {_name(previous)}: not in log order",
                    attempts=[asdict(previous), asdict(a)],
                )
            previous = a
            if highest_commit is not None and a.lease_token > highest_commit:
                verdict.add(
                    "TOKEN_BEYOND_COMMIT",
                    f"{_name(a)}: token beyond the highest commit index {highest_commit}",
                    attempt=asdict(a),
                )
    for ex in h.executions:
        if (ex.key, ex.token) not in committed:
            verdict.add(
                "UNCOMMITTED_EXECUTION",
                f"worker {ex.worker_id} ran {'/'.join(ex.key)} under token {ex.token},"
                " which no committed attempt carries",
                execution=asdict(ex),
            )
    verdict.checked += len(h.executions)
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


# -- loading from a live DB -----------------------------------------------------------------


def load_history(
    engine: Any,
    *,
    statuses: Sequence[NodeStatus],
    due_until: datetime,
    executions: Sequence[Execution] = (),
    digest_samples: Sequence[DigestSample] = (),
    leader_runs: frozenset[tuple[str, str]] | None = None,
) -> History:
    """Read the DAGs, runs, attempts and watermark from the metadata DB behind ``engine``."""
    import sqlalchemy as sa

    from raftsched.store import tables as t

    with engine.connect() as conn:
        dag_rows = conn.execute(sa.select(t.dags.c.spec, t.dags.c.paused)).all()
        runs = [
            RunRow(r.dag_id, r.run_id, r.logical_date, r.run_type, r.state)
            for r in conn.execute(
                sa.select(
                    t.dag_run.c.dag_id,
                    t.dag_run.c.run_id,
                    t.dag_run.c.logical_date,
                    t.dag_run.c.run_type,
                    t.dag_run.c.state,
                )
            )
        ]
        ti = t.task_instance.c
        attempts = [
            AttemptRow(
                r.dag_id,
                r.run_id,
                r.task_id,
                r.try_number,
                r.state,
                r.worker_id,
                r.lease_token,
                r.start_date,
                r.end_date,
            )
            for r in conn.execute(
                sa.select(
                    ti.dag_id,
                    ti.run_id,
                    ti.task_id,
                    ti.try_number,
                    ti.state,
                    ti.worker_id,
                    ti.lease_token,
                    ti.start_date,
                    ti.end_date,
                )
            )
        ]
        watermark = conn.execute(
            sa.select(t.materialize_watermark.c.seq).where(
                t.materialize_watermark.c.id == t.WATERMARK_ROW_ID
            )
        ).scalar_one_or_none()
    specs = [DagSpec.from_dict(row.spec) for row in dag_rows]
    paused = frozenset(row.spec["dag_id"] for row in dag_rows if row.paused)
    return History(
        dags=specs,
        runs=runs,
        attempts=attempts,
        statuses=statuses,
        db_watermark=None if watermark is None else int(watermark),
        due_until=due_until,
        paused=paused,
        executions=executions,
        digest_samples=digest_samples,
        leader_runs=leader_runs,
    )
