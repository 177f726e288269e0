"""What a partition run recorded, as plain data: the ``History`` the checker judges.

A ``History`` holds the DAG specs, the ``dag_run`` and ``task_instance`` rows read from the
metadata DB after the cluster settled, the DB watermark, every node's ``/status`` (and the
digests sampled during the run), and what the workers really executed. ``load_history``
reads one from a live DB; tests build them by hand.

Worker executions come from the workload's own side-effect log (see ``workload.py``): every
task appends JSON lines to its worker's file, ``start`` before it does anything, ``end`` when
it exits normally and ``gone`` from an outside watcher when its process is gone (also after
a SIGKILL, which no process can record itself). ``load_executions`` folds them into one
``Execution`` per attempt process; ``with_tokens`` names each one's fencing token from the
DB attempt row of its (task, try_number), since the worker does not pass the token to the
task. An execution whose try has no leased attempt row keeps ``token=None``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from raftsched.core.model import DagSpec


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
    queued_at: datetime | None = None
    message: str = ""  # a deferred attempt's says whether its trigger fired (invariant 8)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.dag_id, self.run_id, self.task_id)

    @property
    def leased(self) -> bool:
        """A real attempt: a worker held it under a token (not a queued/waiting row)."""
        return self.lease_token is not None


@dataclass(frozen=True, slots=True)
class Execution:
    """What a worker really ran (from the workload's own side-effect log)."""

    dag_id: str
    run_id: str
    task_id: str
    token: int | None  # None: no leased attempt row carries this try
    worker_id: str
    started_at: datetime
    ended_at: datetime | None  # None: still running when the history was taken
    try_number: int | None = None
    pid: int | None = None
    exit_code: int | None = None  # None: killed, or still running

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
    expect_executions: bool = False  # workers ran the workload: no execution is a failure
    taken_at: datetime | None = None  # when the rows were read (run liveness is judged then)


# -- loading from a live DB -----------------------------------------------------------------


def load_history(
    engine: Any,
    *,
    statuses: Sequence[NodeStatus],
    due_until: datetime,
    executions: Sequence[Execution] = (),
    digest_samples: Sequence[DigestSample] = (),
    leader_runs: frozenset[tuple[str, str]] | None = None,
    expect_executions: bool = False,
) -> History:
    """Read the DAGs, runs, attempts and watermark from the metadata DB behind ``engine``.

    ``executions`` without tokens (``token=None``) get theirs from the attempt rows read here.
    """
    import sqlalchemy as sa

    from raftsched.store import tables as t

    taken_at = datetime.now(UTC)
    with engine.connect() as conn:
        dag_rows = conn.execute(sa.select(t.dags.c.spec, t.dags.c.paused)).all()
        dr = t.dag_run.c
        runs = [
            RunRow(r.dag_id, r.run_id, r.logical_date, r.run_type, r.state)
            for r in conn.execute(
                sa.select(dr.dag_id, dr.run_id, dr.logical_date, dr.run_type, dr.state)
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
                r.queued_at,
                r.message or "",
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
                    ti.queued_at,
                    ti.message,
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
        executions=with_tokens(executions, attempts),
        digest_samples=digest_samples,
        leader_runs=leader_runs,
        expect_executions=expect_executions,
        taken_at=taken_at,
    )


# -- worker executions ----------------------------------------------------------------------


# Seconds a worker's guard may take to kill an attempt's tree after the worker died (it is
# signalled at once; its fallback check of its parent runs every 0.25 s).
GUARD_TEARDOWN = 1.0


def load_executions(
    paths: Iterable[Path], worker_deaths: Mapping[str, float] | None = None
) -> list[Execution]:
    """One ``Execution`` per attempt process found in the workload's JSONL files.

    Lines are ``{"event": "start"|"end"|"gone", "dag_id", "run_id", "task_id", "try",
    "pid", "worker", "t": unix seconds, "rc"?}``; a process is (worker, pid, start time).
    A torn last line (the writer was killed mid-write) is skipped. ``ended_at`` is the
    earliest of ``end`` and ``gone``; None when neither came (still running).

    ``worker_deaths`` (worker id -> unix time it was kill -9'd): an attempt of a killed worker
    with neither ``end`` nor ``gone`` ended by then (or by its start, if later: a worker id is
    one generation of a worker, so a later start is one its supervisor forked as it died)
    + :data:`GUARD_TEARDOWN`. Its task is
    bounded and writes ``end`` when it finishes, so it did not finish; and its ``gone``
    watcher (in a session of its own, outside the attempt's process group) was killed too,
    which only the worker's guard does, when the worker dies. An attempt that outlived its
    worker would still finish and write ``end``, and the overlap check would see it.
    """
    deaths = worker_deaths or {}
    # a pid is reused after the kernel's pid_max wraps (32768 here: a busy worker gets there
    # in minutes), so one (worker, pid) may start many processes: keep every start
    starts: dict[tuple[str, int], list[dict[str, Any]]] = {}
    ends: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for path in paths:
        try:
            text = Path(path).read_text(errors="replace")
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            try:
                rec = json.loads(line)
                ident = (str(rec["worker"]), int(rec["pid"]))
                event = rec["event"]
                float(rec["t"])
            except (ValueError, KeyError, TypeError):
                continue
            if event == "start":
                starts.setdefault(ident, []).append(rec)
            elif event in ("end", "gone"):
                ends.setdefault(ident, []).append(rec)
    out = []
    for ident, recs in starts.items():
        recs.sort(key=lambda rec: float(rec["t"]))
        for i, rec in enumerate(recs):
            started = float(rec["t"])
            # the ends of this process: after its start, before the pid's next start
            until = float(recs[i + 1]["t"]) if i + 1 < len(recs) else float("inf")
            mine = [e for e in ends.get(ident, []) if started <= float(e["t"]) < until]
            normal = [e for e in mine if e["event"] == "end"]
            died = deaths.get(ident[0])
            if not mine and died is not None:
                # started after the kill too: the supervisor outlives its worker for a moment
                # and may fork an attempt the worker asked for just before; it kills that one
                # at once (seen: a start line 25 ms after the kill -9, reported dead 0.4 s later)
                mine = [{"event": "gone", "t": max(died, started) + GUARD_TEARDOWN}]
            out.append(
                Execution(
                    dag_id=str(rec["dag_id"]),
                    run_id=str(rec["run_id"]),
                    task_id=str(rec["task_id"]),
                    token=None,
                    worker_id=ident[0],
                    started_at=_when(started),
                    ended_at=_when(min(float(e["t"]) for e in mine)) if mine else None,
                    try_number=int(rec["try"]),
                    pid=ident[1],
                    exit_code=int(normal[0]["rc"]) if normal and "rc" in normal[0] else None,
                )
            )
    out.sort(key=lambda e: (e.started_at, e.worker_id, e.pid or 0))
    return out


def with_tokens(executions: Sequence[Execution], attempts: Sequence[AttemptRow]) -> list[Execution]:
    """Each execution's token from the leased attempt row of its (task, try_number)."""
    tokens = {(a.key, a.try_number): a.lease_token for a in attempts if a.leased}
    return [
        ex
        if ex.token is not None or ex.try_number is None
        else replace(ex, token=tokens.get((ex.key, ex.try_number)))
        for ex in executions
    ]


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)
