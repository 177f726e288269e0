"""The scheduling workload: what the leader loop and the workers would propose.

The real leader loop (``cluster/leader.py``) and the materializer run on threads that wait on
events with timeouts, so they cannot be ticked yet. This module stands in for them with the
same core-facing proposals, decided from the seed at each call of :meth:`Workload.tick`:

- registration of one DAG (two tasks, ``a`` then ``b``), retried until it commits;
- a leader loop on **every node that believes it leads** (a deposed leader keeps deciding
  until it hears otherwise, as the real one does): bursts of ``CreateRuns`` for new slots,
  and sometimes a slot already decided (what a new leader re-deciding would send);
- three workers leasing through any node, completing what they hold, and sometimes sending a
  hostile outcome (a stale token, another worker's lease) that apply must refuse.

A command's ``now`` is its proposer's wall clock: virtual time plus that node's clock offset
(a clock jump moves it). Only committed results count: a grant reaches a worker only when its
``LeaseTasks`` came back SUCCESS (dispatch only after commit).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from raftsched.core import commands as c
from raftsched.core.model import DagSpec, Schedule, ScheduleKind, TaskSpec
from raftsched.raft.outcomes import FailReason
from scripts.sim.cluster import SimCluster

DAG_ID = "sim"
BASE = datetime(2030, 1, 1, tzinfo=UTC)  # proposers' wall clock at virtual time 0
FIRST_SLOT = datetime(2000, 1, 1, tzinfo=UTC)  # slots are days from here: all long due
WORKERS = ("w1", "w2", "w3")


def spec() -> DagSpec:
    tasks = (
        TaskSpec(task_id="a", kind="bash", command="true"),
        TaskSpec(task_id="b", kind="bash", command="true", upstream=("a",)),
    )
    return DagSpec(
        dag_id=DAG_ID,
        fileloc=f"/dags/{DAG_ID}.py",
        schedule=Schedule(ScheduleKind.CRON, cron="0 0 * * *", display="@daily"),
        tasks=tasks,
    )


@dataclass
class Pending:
    request_id: str
    command: c.Command
    outcome: list[tuple[Any, int]]
    worker: str = ""


@dataclass
class Dispatched:
    key: Any
    try_number: int
    token: int
    worker: str


@dataclass
class Workload:
    cluster: SimCluster
    rng: random.Random
    start: float
    offsets: dict[str, float] = field(default_factory=dict)  # clock jumps, per node
    acked: dict[str, str] = field(default_factory=dict)  # request id -> command type
    dispatched: list[Dispatched] = field(default_factory=list)
    held: dict[str, list[Dispatched]] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    hostile_accepted: list[Any] = field(default_factory=list)
    registered: bool = False
    next_slot: int = 0
    proposals: int = 0

    def now_at(self, address: str) -> datetime:
        elapsed = self.cluster.clock() - self.start + self.offsets.get(address, 0.0)
        return BASE + timedelta(seconds=round(elapsed, 3))

    def _request_id(self) -> str:
        self.proposals += 1
        return f"q{self.proposals}"

    def propose(self, via: str, command: c.Command, worker: str = "") -> None:
        outcome = self.cluster.submit(via, command)
        self.pending.append(Pending(command.request_id, command, outcome, worker))

    def _any_live(self) -> str | None:
        live = sorted(self.cluster.live())
        return self.rng.choice(live) if live else None

    def tick(self) -> None:
        self._collect()
        via = self._any_live()
        if via is None:
            return
        if not self.registered:
            if not any(p.command.__class__ is c.RegisterDags for p in self.pending):
                rid = self._request_id()
                self.propose(
                    via, c.RegisterDags(request_id=rid, now=self.now_at(via), specs=(spec(),))
                )
            return
        for leader in self.cluster.leaders():
            if self.rng.random() < 0.5:
                self._leader_loop(leader)
        for worker in WORKERS:
            if self.rng.random() < 0.3:
                self._worker(worker)

    def _leader_loop(self, leader: str) -> None:
        for _ in range(self.rng.randint(1, 8)):
            if self.next_slot and self.rng.random() < 0.15:
                slot = self.rng.randrange(self.next_slot)  # decided again: must be refused
            else:
                slot, self.next_slot = self.next_slot, self.next_slot + 1
            day = FIRST_SLOT + timedelta(days=slot)
            # a manual trigger's conf of a few KiB now and then: entries large enough that a
            # deposed leader's uncommitted tail outgrows one append_entries (64 KiB)
            conf = {"note": "x" * self.rng.randint(1024, 8192)} if self.rng.random() < 0.3 else {}
            decision = c.RunDecision(DAG_ID, day, day, day + timedelta(days=1), conf=conf)
            rid = self._request_id()
            self.propose(
                leader, c.CreateRuns(request_id=rid, now=self.now_at(leader), runs=(decision,))
            )

    def _worker(self, worker: str) -> None:
        via = self._any_live()
        if via is None:
            return
        held = self.held.setdefault(worker, [])
        if held and self.rng.random() < 0.6:
            grant = held.pop(0)
            token, as_worker = grant.token, worker
            hostile = self.rng.random() < 0.1
            if hostile:  # a zombie's outcome: an older token, or another worker's name
                token, as_worker = (token - 1, worker) if self.rng.random() < 0.5 else (token, "wX")
            done = c.CompleteAttempt(
                request_id=self._request_id(),
                now=self.now_at(via),
                key=grant.key,
                token=token,
                success=self.rng.random() < 0.9,
                worker_id=as_worker,
            )
            self.propose(via, done, worker="hostile" if hostile else worker)
            return
        lease = c.LeaseTasks(
            request_id=self._request_id(), now=self.now_at(via), worker_id=worker, max_tasks=2
        )
        self.propose(via, lease, worker=worker)

    def _collect(self) -> None:
        still: list[Pending] = []
        for p in self.pending:
            if not p.outcome:
                still.append(p)
                continue
            result, reason = p.outcome[0]
            if reason != FailReason.SUCCESS:
                continue  # unknown: a later proposal decides again
            self.acked[p.request_id] = type(p.command).__name__
            if isinstance(p.command, c.RegisterDags) and result.ok:
                self.registered = True
            if isinstance(p.command, c.LeaseTasks) and result.ok:
                for grant in result.value or ():
                    lease = grant.lease
                    d = Dispatched(lease.key, lease.try_number, lease.token, lease.worker_id)
                    self.dispatched.append(d)
                    self.held.setdefault(d.worker, []).append(d)
            if p.worker == "hostile" and result.ok:
                self.hostile_accepted.append(p.command)
        self.pending = still
