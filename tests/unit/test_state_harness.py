"""A scenario harness for SchedulerState tests: build specs, apply commands at increasing log
indexes, read task states. Imported by the test_state_* modules and test_properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from raftsched.core import commands as c
from raftsched.core.model import (
    DagSpec,
    RunType,
    Schedule,
    ScheduleKind,
    TaskKey,
    TaskSpec,
    TriggerRule,
)
from raftsched.core.results import LeaseGrant, Result
from raftsched.core.state import SchedulerState

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def task(task_id: str, *upstream: str, **kw: Any) -> TaskSpec:
    if "trigger_rule" in kw:
        kw["trigger_rule"] = TriggerRule(kw["trigger_rule"])
    return TaskSpec(task_id=task_id, kind="bash", command="true", upstream=upstream, **kw)


def dag(dag_id: str, *tasks: TaskSpec, **kw: Any) -> DagSpec:
    return DagSpec(
        dag_id=dag_id,
        fileloc=f"/dags/{dag_id}.py",
        schedule=Schedule(ScheduleKind.CRON, cron="0 0 * * *", display="@daily"),
        tasks=tuple(sorted(tasks, key=lambda t: t.task_id)),
        **kw,
    )


def run_id(logical: datetime = T0, run_type: str = "scheduled") -> str:
    return f"{run_type}__{logical.isoformat()}"


class Sim:
    """One SchedulerState driven like a Raft log: every command gets the next log index."""

    def __init__(self) -> None:
        self.state = SchedulerState()
        self.index = 0
        self.requests = 0
        self.log: list[tuple[c.Command, int]] = []

    def rid(self) -> str:
        self.requests += 1
        return f"req-{self.requests}"

    def apply(self, command: c.Command) -> Result:
        self.index += 1
        self.log.append((command, self.index))
        return self.state.apply(command, log_index=self.index)

    # -- command shorthands -----------------------------------------------------------------

    def register(self, *specs: DagSpec, now: datetime = T0, **kw: Any) -> Result:
        return self.apply(c.RegisterDags(request_id=self.rid(), now=now, specs=specs, **kw))

    def create(
        self,
        dag_id: str,
        logical: datetime = T0,
        *,
        run_type: RunType = RunType.SCHEDULED,
        conf: dict | None = None,
        now: datetime = T0,
    ) -> Result:
        decision = c.RunDecision(
            dag_id,
            logical,
            logical - timedelta(days=1),
            logical,
            run_type=run_type,
            conf=conf or {},
        )
        return self.apply(c.CreateRuns(request_id=self.rid(), now=now, runs=(decision,)))

    def lease(
        self, worker: str = "w1", n: int = 1, now: datetime = T0, ttl: float = 30.0
    ) -> list[LeaseGrant]:
        result = self.apply(
            c.LeaseTasks(
                request_id=self.rid(), now=now, worker_id=worker, max_tasks=n, lease_ttl_seconds=ttl
            )
        )
        assert result.ok, result
        return list(result.value)

    def complete(
        self, grant: LeaseGrant, success: bool = True, now: datetime = T0, **kw: Any
    ) -> Result:
        return self.apply(
            c.CompleteAttempt(
                request_id=self.rid(),
                now=now,
                key=grant.lease.key,
                token=grant.lease.token,
                success=success,
                **kw,
            )
        )

    def append_logs(
        self, grant: LeaseGrant, *chunks: tuple[str, str], now: datetime = T0
    ) -> Result:
        """Log ``(stream, text)`` chunks under ``grant``'s lease."""
        return self.apply(
            c.AppendLogs(
                request_id=self.rid(),
                now=now,
                key=grant.lease.key,
                token=grant.lease.token,
                chunks=tuple(c.LogChunk(stream, text) for stream, text in chunks),
            )
        )

    def run_task(self, task_id: str, success: bool = True, now: datetime = T0) -> LeaseGrant:
        """Lease tasks until ``task_id`` comes up, then complete it (others are released)."""
        grants = self.lease(n=100, now=now)
        wanted = [g for g in grants if g.lease.key.task_id == task_id]
        others = [g for g in grants if g.lease.key.task_id != task_id]
        if others:
            refs = tuple(c.LeaseRef(g.lease.key, g.lease.token) for g in others)
            self.apply(c.ReleaseLeases(request_id=self.rid(), now=now, worker_id="w1", leases=refs))
        assert wanted, f"{task_id} was not leased; got {[g.lease.key for g in grants]}"
        assert self.complete(wanted[0], success, now=now).ok
        return wanted[0]

    # -- reading ----------------------------------------------------------------------------

    def states(self, dag_id: str = "d", run: str | None = None) -> dict[str, str]:
        return {
            ti.key.task_id: str(ti.state)
            for ti in self.state.task_instances(dag_id, run or run_id())
        }

    def ti(self, task_id: str, dag_id: str = "d", run: str | None = None):
        ti = self.state.task_instance(TaskKey(dag_id, run or run_id(), task_id))
        assert ti is not None
        return ti

    def run(self, dag_id: str = "d", run: str | None = None):
        found = self.state.run(dag_id, run or run_id())
        assert found is not None
        return found

    def outbox(self, kind: str | None = None) -> list[dict]:
        entries = self.state.outbox_after(0, 1_000_000)
        return [e.data for e in entries if kind is None or e.kind == kind]
