"""The attempt checks: invariants 2 and 3 over leased attempts and worker executions.

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
   * DOUBLE_EXECUTION (with worker execution records): two executions of one task key
     under different tokens overlap in real time by more than ``tolerance``: the holder of the
     older token kept running after the newer lease began.
   * PHANTOM_SUCCESS (when ``expect_executions``): the cluster accepted a success for an
     attempt no worker ever started.
   * VACUOUS: no attempt was ever leased (or, when ``expect_executions``, no execution was
     recorded): nothing was checked, and a check that cannot fail is no check.
3. ``dispatch_only_after_commit`` — approximated from the rows (a minority leader cannot
   commit, so anything it decided would have to show up as out of log order):
   * TOKEN_REUSED: two attempts of one task key carry the same token.
   * TOKEN_ORDER: tokens are not strictly increasing with try_number.
   * TOKEN_BEYOND_COMMIT: a token greater than the highest commit index any node reports.
   * UNCOMMITTED_EXECUTION: a worker executed a (task, try) that no committed attempt has.
   * EXECUTED_BEFORE_LEASE: an execution began more than ``tolerance`` (plus ``skew``: the
     largest clock offset the clock-skew nemesis applied) before its attempt's lease was
     stamped (start_date): it cannot have waited for the commit.
   * VACUOUS: no attempt was ever leased.

Both take the attempts of one task key in try order; executions are matched to attempts by
their fencing token (``history.with_tokens``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from scripts.partition.history import AttemptRow, Execution, History
from scripts.partition.verdict import Verdict

DEFAULT_TOLERANCE = timedelta(milliseconds=500)


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


def check_one_holder(
    h: History, *, tolerance: timedelta = DEFAULT_TOLERANCE, require_attempts: bool = True
) -> Verdict:
    verdict = Verdict("one_holder_per_attempt", checked=len(h.attempts))
    _require_attempts(verdict, h, require_attempts)
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
    closest: timedelta | None = None  # new start - old end, over executions of one key
    for runs in executions.values():
        runs.sort(key=lambda e: e.started_at)
        for i, old in enumerate(runs):
            for new in runs[i + 1 :]:
                if _lease_of(new) == _lease_of(old):
                    continue
                old_end = old.ended_at or datetime.max.replace(tzinfo=UTC)
                if old.ended_at is not None:
                    gap = new.started_at - old.ended_at
                    closest = gap if closest is None else min(closest, gap)
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
    if h.expect_executions:
        if not h.executions:
            verdict.add(
                "VACUOUS",
                "no worker execution was recorded: real executions were not checked",
            )
        ran = {(ex.key, ex.try_number) for ex in h.executions}
        for a in h.attempts:
            if a.leased and a.state == "success" and (a.key, a.try_number) not in ran:
                verdict.add(
                    "PHANTOM_SUCCESS",
                    f"{_name(a)} succeeded on {a.worker_id} but no worker ever started it",
                    attempt=asdict(a),
                )
    verdict.notes.append(
        f"{sum(1 for a in h.attempts if a.leased)} leased attempts,"
        f" {len(h.executions)} worker executions"
    )
    if closest is not None:
        verdict.notes.append(
            f"closest re-execution of a task began {closest.total_seconds():.3f}s after the"
            " previous one ended"
        )
    return verdict


def _lease_of(ex: Execution) -> tuple[str, int | None]:
    """Executions of one lease: the same token, or (no committed token) the same try."""
    return ("token", ex.token) if ex.token is not None else ("try", ex.try_number)


def _require_attempts(verdict: Verdict, h: History, required: bool) -> None:
    if required and not any(a.leased for a in h.attempts):
        verdict.add(
            "VACUOUS",
            "no task attempt was ever leased: this invariant was checked over nothing",
        )


def _started(a: AttemptRow) -> datetime:
    assert a.start_date is not None
    return a.start_date


# -- 3. dispatch only after commit ----------------------------------------------------------


def check_dispatch_after_commit(
    h: History,
    *,
    tolerance: timedelta = DEFAULT_TOLERANCE,
    require_attempts: bool = True,
    skew: timedelta = timedelta(0),
) -> Verdict:
    """``skew``: the largest clock offset a clock-skew step gave a node during the run
    (``faults.max_skew``): EXECUTED_BEFORE_LEASE compares a worker's wall clock with a node's
    stamp, so it allows that much more (and only it: the other comparisons are stamp with
    stamp, or wall clock with wall clock)."""
    verdict = Verdict("dispatch_only_after_commit", checked=len(h.attempts))
    _require_attempts(verdict, h, require_attempts)
    leases: dict[tuple[tuple[str, str, str], int], AttemptRow] = {}
    earliest: timedelta | None = None  # execution start - lease stamp
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
            leases[(key, a.lease_token)] = a
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
        if ex.token is None or (ex.key, ex.token) not in committed:
            which = f"token {ex.token}" if ex.token is not None else f"try {ex.try_number}"
            verdict.add(
                "UNCOMMITTED_EXECUTION",
                f"worker {ex.worker_id} ran {'/'.join(ex.key)} under {which},"
                " which no committed attempt carries",
                execution=asdict(ex),
            )
            continue
        lease = leases[(ex.key, ex.token)]
        if lease.start_date is not None:
            lag = ex.started_at - lease.start_date
            earliest = lag if earliest is None else min(earliest, lag)
        if lease.start_date is not None and ex.started_at < lease.start_date - tolerance - skew:
            verdict.add(
                "EXECUTED_BEFORE_LEASE",
                f"worker {ex.worker_id} started {_name(lease)} at {ex.started_at}, before its"
                f" lease was stamped at {lease.start_date}",
                execution=asdict(ex),
                attempt=asdict(lease),
            )
    verdict.checked += len(h.executions)
    if earliest is not None:
        verdict.notes.append(
            f"earliest execution began {earliest.total_seconds():.3f}s after its lease stamp"
        )
    if skew:
        verdict.notes.append(
            f"a node's clock was skewed by up to {skew.total_seconds():.3f}s: execution starts"
            " are compared with lease stamps within that much more"
        )
    return verdict
