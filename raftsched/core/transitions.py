"""Live runs and the task/run transitions every handler shares.

:func:`set_state` is the one place a task instance changes state: it keeps the derived
indexes right (ready queue, running set and per-DAG counts, retry heap, a run's count of
unfinished tasks). :func:`settle` applies trigger rules downstream of a change (queueing what
is ready, ruling out what can never run) and :func:`settle_run` finishes a run whose tasks are
all done. Callers touch (``outbox.touch_ti``) what they change before changing it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from raftsched.core import snapshot as sn
from raftsched.core.model import (
    FINISHED_RUN_STATES,
    FINISHED_TASK_STATES,
    DagRun,
    DagSpec,
    OutboxKind,
    RunState,
    TaskInstance,
    TaskKey,
    TaskState,
)
from raftsched.core.outbox import emit_entry, touch_run, touch_ti
from raftsched.core.ready import Topology, UpstreamCounts, Verdict, evaluate_trigger, next_retry_at

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

RunKey = tuple[str, str]  # (dag_id, run_id)


class LiveRun:
    """A live run: its DagRun, the spec version it runs, its task instances."""

    __slots__ = ("row_seq", "run", "spec", "tis", "topo", "unfinished")

    def __init__(self, run: DagRun, spec: DagSpec, topo: Topology) -> None:
        self.run = run
        self.spec = spec
        self.topo = topo
        self.tis: dict[str, TaskInstance] = {}
        self.unfinished = 0
        self.row_seq = 0  # seq of the last DAG_RUN outbox entry of this run

    @property
    def key(self) -> RunKey:
        return (self.run.dag_id, self.run.run_id)


def find(state: SchedulerState, key: TaskKey) -> tuple[LiveRun, TaskInstance] | None:
    rec = state._runs.get(key.dag_id, {}).get(key.run_id)
    if rec is None:
        return None
    ti = rec.tis.get(key.task_id)
    return None if ti is None else (rec, ti)


def set_state(state: SchedulerState, rec: LiveRun, ti: TaskInstance, new: TaskState) -> None:
    """Move ``ti`` to ``new``, keeping every derived index right. The caller has touched
    ``ti`` and set what the new state needs (lease, queued_at, next_retry_at)."""
    old = ti.state
    if old is new:
        return
    dag_id = ti.key.dag_id
    if old is TaskState.QUEUED:
        state._ready.discard(ti.key)
    elif old is TaskState.RUNNING:
        del state._running[ti.key]
        state._running_by_dag[dag_id] -= 1
        ti.lease = None
        state._ready.unblock(dag_id)
    elif old is TaskState.UP_FOR_RETRY:
        state._n_retry -= 1
    was_done, is_done = old in FINISHED_TASK_STATES, new in FINISHED_TASK_STATES
    if was_done != is_done:
        rec.unfinished += -1 if is_done else 1
    ti.state = new
    if new is TaskState.QUEUED:
        assert ti.queued_at is not None
        priority = rec.topo.tasks[ti.key.task_id].priority_weight
        state._ready.push(ti.key, priority, ti.queued_at)
    elif new is TaskState.RUNNING:
        state._running[ti.key] = ti
        state._running_by_dag[dag_id] = state._running_by_dag.get(dag_id, 0) + 1
    elif new is TaskState.UP_FOR_RETRY:
        assert ti.next_retry_at is not None
        state._n_retry += 1
        state._retries.push(ti.next_retry_at, ti.key)


def queue(state: SchedulerState, rec: LiveRun, ti: TaskInstance, now: datetime) -> None:
    touch_ti(state, ti)
    ti.queued_at = now
    ti.next_retry_at = None
    set_state(state, rec, ti, TaskState.QUEUED)


def trigger_verdict(state: SchedulerState, rec: LiveRun, task_id: str) -> Verdict:
    task = rec.topo.tasks[task_id]
    ups = UpstreamCounts.of(rec.tis[u].state for u in rec.topo.upstream[task_id])
    return evaluate_trigger(task.trigger_rule, ups)


def settle(state: SchedulerState, rec: LiveRun, task_ids: Iterable[str], now: datetime) -> None:
    """Queue the given NONE tasks whose trigger rule is met; rule out (UPSTREAM_FAILED,
    SKIPPED) those that can never run, and go on downstream of those."""
    work = deque(task_ids)
    while work:
        ti = rec.tis[work.popleft()]
        if ti.state is not TaskState.NONE:
            continue
        verdict = trigger_verdict(state, rec, ti.key.task_id)
        if verdict is Verdict.READY:
            queue(state, rec, ti, now)
        elif verdict is not Verdict.WAIT:
            touch_ti(state, ti)
            ti.end_date = now
            set_state(state, rec, ti, TaskState(verdict.value))
            work.extend(rec.topo.downstream[ti.key.task_id])


def finish_task(
    state: SchedulerState, rec: LiveRun, ti: TaskInstance, target: TaskState, now: datetime
) -> None:
    set_state(state, rec, ti, target)
    settle(state, rec, rec.topo.downstream[ti.key.task_id], now)
    settle_run(state, rec, now)


def settle_run(state: SchedulerState, rec: LiveRun, now: datetime) -> None:
    """A run whose tasks are all finished is FAILED if a leaf failed, else SUCCESS."""
    if rec.unfinished:
        return
    run = rec.run
    bad = (TaskState.FAILED, TaskState.UPSTREAM_FAILED)
    failed = any(rec.tis[t].state in bad for t in rec.topo.leaves)
    new = RunState.FAILED if failed else RunState.SUCCESS
    if run.state is new:
        return
    touch_run(state, rec)
    if run.state not in FINISHED_RUN_STATES:
        state._active_runs[run.dag_id] -= 1
        state._n_finished_runs += 1
    run.state = new
    run.start_date = run.start_date or now
    run.end_date = now
    state._finished.push(now, rec.key)


def reopen_run(state: SchedulerState, rec: LiveRun) -> None:
    run = rec.run
    if run.state in FINISHED_RUN_STATES:
        touch_run(state, rec)
        run.state = RunState.RUNNING
        run.end_date = None
        state._active_runs[run.dag_id] = state._active_runs.get(run.dag_id, 0) + 1
        state._n_finished_runs -= 1


def fail_attempt(state: SchedulerState, rec: LiveRun, ti: TaskInstance, now: datetime) -> None:
    """The running attempt failed (the caller touched ``ti`` and set its outcome)."""
    if ti.try_number < ti.max_tries:
        emit_entry(state, OutboxKind.TASK_INSTANCE, sn.ti_row(ti, TaskState.FAILED))
        task = rec.topo.tasks[ti.key.task_id]
        ti.next_retry_at = next_retry_at(task, ti.try_number, now)
        set_state(state, rec, ti, TaskState.UP_FOR_RETRY)
    else:
        finish_task(state, rec, ti, TaskState.FAILED, now)
