"""The callback table: callback jobs (on_failure_callback & co., deadline alerts) and their
leases.

Owns the jobs by job id: the open ones (pending, or leased to a worker under a fencing token)
in creation order, the finished ones (succeeded or failed) in the order they finished, the
runs whose deadline alert is committed, the creation counter and the count of jobs dropped
because the table was full. Guarantees: a job id is created at most once while its job is
held (a repeat of the same event is a no-op), so a job that finished is never run again;
at most ``MAX_OPEN_JOBS`` open and ``MAX_DONE_JOBS`` finished jobs are held (the oldest
finished leave first, and every finished job leaves ``DONE_RETENTION_SECONDS`` after it
finished); each job's fingerprint (:func:`fp_job`), each alerted run's and the counters' are
in the shared digest sum exactly while held. The table joins the snapshot only when it was
ever used (``SchedulerState.snapshot``). Raises nothing on any input the handlers pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from raftsched.core import digest as dg
from raftsched.core.digest_sum import DigestSum
from raftsched.core.model import parse_utc, utc_iso

MAX_OPEN_JOBS = 1_000  # pending + leased; past it a new job is dropped (and counted)
MAX_DONE_JOBS = 1_000  # finished jobs remembered (so a repeat of their event is a no-op)
DONE_RETENTION_SECONDS = 3_600.0
MAX_ATTEMPTS = 3  # leases of one job; a lease that expires (its worker died) may come back

PENDING, RUNNING, SUCCESS, FAILED = "pending", "running", "success", "failed"
RunRef = tuple[str, str]  # (dag_id, run_id)


@dataclass(frozen=True, slots=True)
class CallbackJob:
    """One callback to run for one committed event. ``context_json`` is the context dict the
    callable gets; its output goes to the log of ``log_task_id`` try ``log_try``."""

    job_id: str
    seq: int  # creation order, 1, 2, ...: its log chunks are numbered from it
    dag_id: str
    run_id: str
    task_id: str  # "" for a run-level callback
    try_number: int
    event: str
    callable_ref: str
    kwargs_json: str
    fileloc: str
    context_json: str
    log_task_id: str
    log_try: int
    created_at: datetime
    state: str = PENDING
    attempts: int = 0
    worker_id: str = ""
    token: int = 0
    expires_at: datetime | None = None
    finished_at: datetime | None = None
    message: str = ""

    def to_list(self) -> list[Any]:
        data = asdict(self)
        for name in ("created_at", "expires_at", "finished_at"):
            data[name] = utc_iso(data[name])
        return [data[f] for f in _FIELDS]

    @classmethod
    def from_list(cls, items: list[Any]) -> CallbackJob:
        data = dict(zip(_FIELDS, items, strict=True))
        for name in ("created_at", "expires_at", "finished_at"):
            data[name] = parse_utc(data[name])
        return cls(**data)


_FIELDS = tuple(CallbackJob.__dataclass_fields__)


def fp_job(job: CallbackJob) -> str:
    return "callback:" + dg.canonical(job)


def fp_alert(ref: RunRef, when: datetime) -> str:
    return "deadline:" + dg.canonical((ref[0], ref[1], when))


def fp_counters(seq: int, dropped: int) -> str:
    return "callbacks:" + dg.canonical((seq, dropped))


class CallbackTable:
    __slots__ = ("_alerted", "_done", "_open", "_sum", "dropped", "seq")

    def __init__(self, digest_sum: DigestSum) -> None:
        self._sum = digest_sum
        self._open: dict[str, CallbackJob] = {}
        self._done: dict[str, CallbackJob] = {}
        self._alerted: dict[RunRef, datetime] = {}
        self.seq = 0
        self.dropped = 0

    def __bool__(self) -> bool:
        return bool(self.seq or self.dropped or self._alerted)

    def get(self, job_id: str) -> CallbackJob | None:
        return self._open.get(job_id) or self._done.get(job_id)

    def jobs(self) -> Iterator[CallbackJob]:
        yield from self._open.values()
        yield from self._done.values()

    @property
    def open_count(self) -> int:
        return len(self._open)

    # -- creation ---------------------------------------------------------------------------

    def next_seq(self) -> int:
        return self.seq + 1

    def add(self, job: CallbackJob, now: datetime) -> bool:
        """Hold a new job (``job.seq`` must be :meth:`next_seq`). False: its id is held
        already (the same event again), or the table is full (counted in ``dropped``)."""
        if job.job_id in self._open or job.job_id in self._done:
            return False
        self.evict_done(now)
        if len(self._open) >= MAX_OPEN_JOBS:
            self._counters(self.seq, self.dropped + 1)
            return False
        self._counters(job.seq, self.dropped)
        self._open[job.job_id] = job
        self._sum.add(fp_job, job)
        return True

    def _counters(self, seq: int, dropped: int) -> None:
        if self.seq or self.dropped:
            self._sum.remove(fp_counters, self.seq, self.dropped)
        self.seq, self.dropped = seq, dropped
        self._sum.add(fp_counters, seq, dropped)

    # -- leases -----------------------------------------------------------------------------

    def leasable(self, now: datetime) -> Iterator[CallbackJob]:
        """Open jobs a worker may take now: pending ones and those whose lease expired."""
        for job in self._open.values():
            if job.state == PENDING or (job.expires_at is not None and job.expires_at <= now):
                yield job

    def running_jobs(self) -> Iterator[CallbackJob]:
        return (job for job in self._open.values() if job.state == RUNNING)

    def lease(
        self, job: CallbackJob, worker_id: str, token: int, expires_at: datetime, now: datetime
    ) -> CallbackJob | None:
        """Grant ``job`` (from :meth:`leasable`) to ``worker_id``; None when it has had its
        MAX_ATTEMPTS leases (it then fails)."""
        if job.attempts >= MAX_ATTEMPTS:
            self.finish(job, FAILED, f"not done after {job.attempts} leases (they expired)", now)
            return None
        leased = replace(
            job,
            state=RUNNING,
            attempts=job.attempts + 1,
            worker_id=worker_id,
            token=token,
            expires_at=expires_at,
        )
        self._put_open(job, leased)
        return leased

    def _put_open(self, old: CallbackJob, new: CallbackJob) -> None:
        self._sum.remove(fp_job, old)
        self._open[new.job_id] = new
        self._sum.add(fp_job, new)

    def finish(self, job: CallbackJob, state: str, message: str, now: datetime) -> CallbackJob:
        """``job`` (open) succeeded or failed for good."""
        self._sum.remove(fp_job, job)
        del self._open[job.job_id]
        # what it ran with is no longer needed: a finished job keeps only its id and outcome
        done = replace(
            job,
            state=state,
            message=message,
            finished_at=now,
            expires_at=None,
            context_json="",
            kwargs_json="",
        )
        self._done[done.job_id] = done
        self._sum.add(fp_job, done)
        self.evict_done(now)
        return done

    def evict_done(self, now: datetime) -> None:
        """Finished jobs past their retention, and the oldest past MAX_DONE_JOBS, leave."""
        cutoff = now - timedelta(seconds=DONE_RETENTION_SECONDS)
        while self._done:
            job = next(iter(self._done.values()))
            assert job.finished_at is not None
            if len(self._done) <= MAX_DONE_JOBS and job.finished_at > cutoff:
                break
            del self._done[job.job_id]
            self._sum.remove(fp_job, job)

    # -- deadline alerts --------------------------------------------------------------------

    def alerted(self, ref: RunRef) -> bool:
        return ref in self._alerted

    def alert(self, ref: RunRef, now: datetime) -> None:
        self._alerted[ref] = now
        self._sum.add(fp_alert, ref, now)

    def forget_alerts(self, keep: Any) -> None:
        """Drop the alerts of runs ``keep(ref)`` says are gone from memory."""
        for ref in [ref for ref in self._alerted if not keep(ref)]:
            self._sum.remove(fp_alert, ref, self._alerted.pop(ref))

    # -- digest and snapshot ------------------------------------------------------------------

    def fingerprints(self) -> Iterator[tuple[Callable[..., str], tuple[Any, ...]]]:
        """Each held entity's fingerprint function and its arguments (``DigestSum.add``)."""
        for job in self.jobs():
            yield fp_job, (job,)
        for ref, when in self._alerted.items():
            yield fp_alert, (ref, when)
        if self.seq or self.dropped:
            yield fp_counters, (self.seq, self.dropped)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "dropped": self.dropped,
            "open": [job.to_list() for job in self._open.values()],
            "done": [job.to_list() for job in self._done.values()],
            "alerted": [[d, r, utc_iso(when)] for (d, r), when in self._alerted.items()],
        }

    def load(self, data: Any) -> None:
        """Restore (a snapshot's ``callbacks``, or None); the caller recomputes the digest."""
        if not data:
            return
        self.seq, self.dropped = int(data["seq"]), int(data["dropped"])
        self._open = {j.job_id: j for j in map(CallbackJob.from_list, data["open"])}
        self._done = {j.job_id: j for j in map(CallbackJob.from_list, data["done"])}
        for dag_id, run_id, when in data["alerted"]:
            parsed = parse_utc(when)
            assert parsed is not None
            self._alerted[(str(dag_id), str(run_id))] = parsed
