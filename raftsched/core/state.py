"""SchedulerState: the replicated state machine. ``apply`` is its only mutator.

Deterministic: apply reads no clock (time is ``command.now``), no randomness, no I/O; the
fencing token of a lease is the Raft log index passed in by the caller. Each decision is
re-checked at apply (compare-and-set), so a stale or duplicate proposal is a no-op with a
reason (``core.results``). Consequences that need no clock happen inside apply: a new run
queues its root tasks, a finished attempt queues (or rules out) its downstream tasks and
settles the run. Time-driven transitions (retries coming due, lease expiry) need a command:
the leader reads :meth:`ready_to_queue` / :meth:`expired_leases` and proposes them.

Policies worth knowing:
- A new DAG starts unpaused unless ``RegisterDags.paused_at_creation``.
- Scheduled runs are refused when the DAG is paused or at max_active_runs, and for a slot at
  or before the DAG's last scheduled logical date (covers runs already evicted from memory).
  Manual runs (trigger, backfill) are accepted while paused and beyond max_active_runs (they
  count towards it); a paused DAG's tasks are not leased until it is unpaused (Airflow). A
  manual run for the date of a run already evicted from memory is not detected here: the
  API checks the DB's history first.
- max_active_tasks is per DAG across its runs (Airflow 2), read from the current spec. A run
  executes the DAG version it was created with.
- Not thread-safe: readers must not run concurrently with apply (pysyncobj applies on its
  tick thread; read there or under the node's lock).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import islice
from types import MappingProxyType
from typing import Any

from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import results as r
from raftsched.core import snapshot as sn
from raftsched.core.model import (
    FINISHED_RUN_STATES,
    FINISHED_TASK_STATES,
    DagRecord,
    DagRun,
    DagSpec,
    ImportErrorRecord,
    Lease,
    OutboxEntry,
    OutboxKind,
    RunState,
    RunType,
    TaskInstance,
    TaskKey,
    TaskState,
)
from raftsched.core.ready import (
    ReadyQueue,
    TimeIndex,
    Topology,
    UpstreamCounts,
    Verdict,
    evaluate_trigger,
    next_retry_at,
)
from raftsched.core.results import Item, LeaseGrant, Result
from raftsched.errors import SnapshotVersionError

DEDUP_CAPACITY = 10_000  # request ids remembered (FIFO); part of the snapshot
LOG_STREAMS = frozenset({"stdout", "stderr"})
RunKey = tuple[str, str]  # (dag_id, run_id)


class _Run:
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


def _aware(value: Any) -> bool:
    return isinstance(value, datetime) and value.utcoffset() is not None


class SchedulerState:
    def __init__(self) -> None:
        self.applied_index = 0
        self._specs: dict[str, DagSpec] = {}  # by spec_hash: current DAG versions + run versions
        self._spec_refs: dict[str, int] = {}
        self._topologies: dict[str, Topology] = {}
        self._dags: dict[str, DagRecord] = {}
        self._runs: dict[str, dict[str, _Run]] = {}  # dag_id -> run_id -> run
        self._dates: dict[tuple[str, datetime], str] = {}  # (dag_id, logical_date) -> run_id
        self._active_runs: dict[str, int] = {}
        self._running: dict[TaskKey, TaskInstance] = {}
        self._running_by_dag: dict[str, int] = {}
        self._n_retry = 0
        self._n_finished_runs = 0
        self._ready = ReadyQueue()
        self._retries: TimeIndex[TaskKey] = TimeIndex(self._retry_live)
        self._expiry: TimeIndex[TaskKey] = TimeIndex(self._lease_live)
        self._finished: TimeIndex[RunKey] = TimeIndex(self._finished_live)
        self._import_errors: tuple[ImportErrorRecord, ...] = ()
        self._outbox: deque[OutboxEntry] = deque()
        self._acked_seq = 0
        self._last_seq = 0
        self._dedup: OrderedDict[str, Result] = OrderedDict()
        self._sum = dg.DigestSum()
        # Entities changed by the command being applied: key -> write an outbox row?
        self._dirty_tis: dict[TaskKey, bool] = {}
        self._dirty_runs: dict[RunKey, bool] = {}
        self._dirty_dags: set[str] = set()

    # == apply ===============================================================================

    def apply(self, command: c.Command, *, log_index: int) -> Result:
        """Apply one committed command at Raft index ``log_index`` (> applied_index)."""
        if log_index <= self.applied_index:
            return Result(False, r.STALE_INDEX)
        self.applied_index = log_index
        return self._apply(command, log_index)

    def _apply(self, command: c.Command, log_index: int) -> Result:
        seen = self._dedup.get(command.request_id)
        if seen is not None:
            return replace(seen, duplicate=True)
        handler = _HANDLERS.get(type(command))
        if handler is None:
            result = Result(False, r.UNKNOWN_COMMAND)
        elif not _aware(command.now):
            result = Result(False, r.INVALID, "now must be an aware datetime")
        else:
            now = command.now.astimezone(UTC)
            try:
                result = handler(self, command, now, log_index)
            except Exception as exc:  # a bug; identical on every replica, keeps the node alive
                result = Result(False, r.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            self._flush()
            self._prune()
        self._remember(command.request_id, result)
        return result

    def _remember(self, request_id: str, result: Result) -> None:
        old = self._dedup.pop(request_id, None)
        if old is not None:
            self._sum.remove(dg.fp_request(request_id, old))
        self._dedup[request_id] = result
        self._sum.add(dg.fp_request(request_id, result))
        while len(self._dedup) > DEDUP_CAPACITY:
            old_id, old = self._dedup.popitem(last=False)
            self._sum.remove(dg.fp_request(old_id, old))

    # -- change tracking (digest and outbox) ------------------------------------------------

    def _touch_ti(self, ti: TaskInstance, emit: bool = True) -> None:
        key = ti.key
        if key not in self._dirty_tis:
            self._sum.remove(dg.fp_ti(ti))
            self._dirty_tis[key] = emit
        elif emit:
            self._dirty_tis[key] = True

    def _touch_run(self, rec: _Run, emit: bool = True) -> None:
        key = rec.key
        if key not in self._dirty_runs:
            self._sum.remove(dg.fp_run(rec.run, rec.spec.spec_hash, rec.row_seq))
            self._dirty_runs[key] = emit
        elif emit:
            self._dirty_runs[key] = True

    def _set_dag(self, record: DagRecord, emit: bool, now: datetime | None = None) -> None:
        dag_id = record.spec.dag_id
        old = self._dags.get(dag_id)
        if old is not None and dag_id not in self._dirty_dags:
            self._sum.remove(dg.fp_dag(dag_id, old))
        self._dirty_dags.add(dag_id)
        if emit:
            record = replace(record, updated_at=now)
        self._dags[dag_id] = record
        if emit:
            self._emit(OutboxKind.DAG, sn.dag_row(record))

    def _emit(self, kind: OutboxKind, data: dict) -> int:
        self._last_seq += 1
        entry = OutboxEntry(self._last_seq, kind, data)
        self._outbox.append(entry)
        self._sum.add(dg.fp_outbox(entry))
        return entry.seq

    def _flush(self) -> None:
        """End of a command: write outbox rows of changed TIs then runs; re-add digests."""
        for key, emit in self._dirty_tis.items():
            found = self._find(key)
            if found is not None:
                ti = found[1]
                if emit:
                    self._emit(OutboxKind.TASK_INSTANCE, sn.ti_row(ti))
                self._sum.add(dg.fp_ti(ti))
        for (dag_id, run_id), emit in self._dirty_runs.items():
            rec = self._runs.get(dag_id, {}).get(run_id)
            if rec is not None:
                if emit:
                    rec.row_seq = self._emit(OutboxKind.DAG_RUN, sn.run_row(rec.run))
                self._sum.add(dg.fp_run(rec.run, rec.spec.spec_hash, rec.row_seq))
        for dag_id in self._dirty_dags:
            self._sum.add(dg.fp_dag(dag_id, self._dags[dag_id]))
        self._dirty_tis.clear()
        self._dirty_runs.clear()
        self._dirty_dags.clear()

    def _prune(self) -> None:
        self._retries.prune(self._n_retry)
        self._expiry.prune(len(self._running))
        self._finished.prune(self._n_finished_runs)

    # -- index validity ---------------------------------------------------------------------

    def _retry_live(self, key: TaskKey, when: datetime) -> bool:
        found = self._find(key)
        return (
            found is not None
            and found[1].state is TaskState.UP_FOR_RETRY
            and found[1].next_retry_at == when
        )

    def _lease_live(self, key: TaskKey, when: datetime) -> bool:
        ti = self._running.get(key)
        return ti is not None and ti.lease is not None and ti.lease.expires_at == when

    def _finished_live(self, key: RunKey, when: datetime) -> bool:
        rec = self._runs.get(key[0], {}).get(key[1])
        return rec is not None and rec.run.state in FINISHED_RUN_STATES and rec.run.end_date == when

    # -- specs ------------------------------------------------------------------------------

    def _ref_spec(self, spec: DagSpec) -> DagSpec:
        shared = self._specs.get(spec.spec_hash)
        if shared is None:
            shared = self._specs[spec.spec_hash] = spec
            self._topologies[spec.spec_hash] = Topology(spec)
        self._spec_refs[spec.spec_hash] = self._spec_refs.get(spec.spec_hash, 0) + 1
        return shared

    def _unref_spec(self, spec_hash: str) -> None:
        self._spec_refs[spec_hash] -= 1
        if not self._spec_refs[spec_hash]:
            del self._spec_refs[spec_hash], self._specs[spec_hash], self._topologies[spec_hash]

    # -- task and run transitions -----------------------------------------------------------

    def _find(self, key: TaskKey) -> tuple[_Run, TaskInstance] | None:
        rec = self._runs.get(key.dag_id, {}).get(key.run_id)
        if rec is None:
            return None
        ti = rec.tis.get(key.task_id)
        return None if ti is None else (rec, ti)

    def _set_state(self, rec: _Run, ti: TaskInstance, new: TaskState) -> None:
        """Move ``ti`` to ``new``, keeping every derived index right. The caller has touched
        ``ti`` and set what the new state needs (lease, queued_at, next_retry_at)."""
        old = ti.state
        if old is new:
            return
        dag_id = ti.key.dag_id
        if old is TaskState.QUEUED:
            self._ready.discard(ti.key)
        elif old is TaskState.RUNNING:
            del self._running[ti.key]
            self._running_by_dag[dag_id] -= 1
            ti.lease = None
            self._ready.unblock(dag_id)
        elif old is TaskState.UP_FOR_RETRY:
            self._n_retry -= 1
        was_done, is_done = old in FINISHED_TASK_STATES, new in FINISHED_TASK_STATES
        if was_done != is_done:
            rec.unfinished += -1 if is_done else 1
        ti.state = new
        if new is TaskState.QUEUED:
            assert ti.queued_at is not None
            priority = rec.topo.tasks[ti.key.task_id].priority_weight
            self._ready.push(ti.key, priority, ti.queued_at)
        elif new is TaskState.RUNNING:
            self._running[ti.key] = ti
            self._running_by_dag[dag_id] = self._running_by_dag.get(dag_id, 0) + 1
        elif new is TaskState.UP_FOR_RETRY:
            assert ti.next_retry_at is not None
            self._n_retry += 1
            self._retries.push(ti.next_retry_at, ti.key)

    def _queue(self, rec: _Run, ti: TaskInstance, now: datetime) -> None:
        self._touch_ti(ti)
        ti.queued_at = now
        ti.next_retry_at = None
        self._set_state(rec, ti, TaskState.QUEUED)

    def _verdict(self, rec: _Run, task_id: str) -> Verdict:
        task = rec.topo.tasks[task_id]
        ups = UpstreamCounts.of(rec.tis[u].state for u in rec.topo.upstream[task_id])
        return evaluate_trigger(task.trigger_rule, ups)

    def _settle(self, rec: _Run, task_ids: Iterable[str], now: datetime) -> None:
        """Queue the given NONE tasks whose trigger rule is met; rule out (UPSTREAM_FAILED,
        SKIPPED) those that can never run, and go on downstream of those."""
        work = deque(task_ids)
        while work:
            ti = rec.tis[work.popleft()]
            if ti.state is not TaskState.NONE:
                continue
            verdict = self._verdict(rec, ti.key.task_id)
            if verdict is Verdict.READY:
                self._queue(rec, ti, now)
            elif verdict is not Verdict.WAIT:
                self._touch_ti(ti)
                ti.end_date = now
                self._set_state(rec, ti, TaskState(verdict.value))
                work.extend(rec.topo.downstream[ti.key.task_id])

    def _finish_task(self, rec: _Run, ti: TaskInstance, state: TaskState, now: datetime) -> None:
        self._set_state(rec, ti, state)
        self._settle(rec, rec.topo.downstream[ti.key.task_id], now)
        self._settle_run(rec, now)

    def _settle_run(self, rec: _Run, now: datetime) -> None:
        """A run whose tasks are all finished is FAILED if a leaf failed, else SUCCESS."""
        if rec.unfinished:
            return
        run = rec.run
        bad = (TaskState.FAILED, TaskState.UPSTREAM_FAILED)
        failed = any(rec.tis[t].state in bad for t in rec.topo.leaves)
        new = RunState.FAILED if failed else RunState.SUCCESS
        if run.state is new:
            return
        self._touch_run(rec)
        if run.state not in FINISHED_RUN_STATES:
            self._active_runs[run.dag_id] -= 1
            self._n_finished_runs += 1
        run.state = new
        run.start_date = run.start_date or now
        run.end_date = now
        self._finished.push(now, rec.key)

    def _reopen_run(self, rec: _Run) -> None:
        run = rec.run
        if run.state in FINISHED_RUN_STATES:
            self._touch_run(rec)
            run.state = RunState.RUNNING
            run.end_date = None
            self._active_runs[run.dag_id] = self._active_runs.get(run.dag_id, 0) + 1
            self._n_finished_runs -= 1

    def _fail_attempt(self, rec: _Run, ti: TaskInstance, now: datetime) -> None:
        """The running attempt failed (the caller touched ``ti`` and set its outcome)."""
        if ti.try_number < ti.max_tries:
            self._emit(OutboxKind.TASK_INSTANCE, sn.ti_row(ti, TaskState.FAILED))
            task = rec.topo.tasks[ti.key.task_id]
            ti.next_retry_at = next_retry_at(task, ti.try_number, now)
            self._set_state(rec, ti, TaskState.UP_FOR_RETRY)
        else:
            self._finish_task(rec, ti, TaskState.FAILED, now)

    def _append_logs(self, ti: TaskInstance, chunks: Iterable[c.LogChunk], now: datetime) -> None:
        for chunk in chunks:
            self._touch_ti(ti, emit=False)
            ti.log_chunks += 1
            key = ti.key
            self._emit(
                OutboxKind.TASK_LOG,
                {
                    "dag_id": key.dag_id,
                    "run_id": key.run_id,
                    "task_id": key.task_id,
                    "try_number": ti.try_number,
                    "chunk_seq": ti.log_chunks,
                    "stream": chunk.stream,
                    "text": chunk.text,
                    "created_at": sn.utc_iso(now),
                },
            )

    def _can_take(self, dag_id: str) -> bool:
        record = self._dags.get(dag_id)
        if record is None:
            return True
        running = self._running_by_dag.get(dag_id, 0)
        return not record.paused and running < record.spec.max_active_tasks

    def _current_lease(self, ref: c.LeaseRef) -> tuple[str, _Run | None, TaskInstance | None]:
        found = self._find(ref.key)
        if found is None:
            return r.UNKNOWN_TASK, None, None
        rec, ti = found
        if ti.state is not TaskState.RUNNING or ti.lease is None or ti.lease.token != ref.token:
            return r.STALE_TOKEN, rec, ti
        return "", rec, ti

    def _evict_run(self, rec: _Run) -> None:
        run = rec.run
        self._touch_run(rec, emit=False)
        for ti in rec.tis.values():
            self._touch_ti(ti, emit=False)
        runs = self._runs[run.dag_id]
        del runs[run.run_id]
        if not runs:
            del self._runs[run.dag_id]
        del self._dates[(run.dag_id, run.logical_date)]
        self._n_finished_runs -= 1
        self._unref_spec(rec.spec.spec_hash)

    # == handlers ============================================================================

    def _register_dags(self, cmd: c.RegisterDags, now: datetime, index: int) -> Result:
        items = []
        for spec in cmd.specs:
            if (
                not isinstance(spec, DagSpec)
                or not spec.dag_id
                or not all(d is None or _aware(d) for d in (spec.start_date, spec.end_date))
            ):
                items.append(Item(False, r.INVALID))
                continue
            if not spec.spec_hash:
                spec = replace(spec, spec_hash=spec.compute_hash())
            record = self._dags.get(spec.dag_id)
            if record is not None and record.active and record.spec.spec_hash == spec.spec_hash:
                items.append(Item(True, r.UNCHANGED, spec.dag_id))
                continue
            spec = self._ref_spec(spec)
            if record is None:
                new = DagRecord(spec, paused=cmd.paused_at_creation)
            else:
                self._unref_spec(record.spec.spec_hash)
                new = replace(record, spec=spec, active=True)
            self._set_dag(new, emit=True, now=now)
            self._ready.unblock(spec.dag_id)  # max_active_tasks may have grown
            items.append(Item(True, "", spec.dag_id))
        return Result.of_items(items)

    def _remove_dags(self, cmd: c.RemoveDags, now: datetime, index: int) -> Result:
        items = []
        for dag_id in cmd.dag_ids:
            record = self._dags.get(dag_id)
            if record is None:
                items.append(Item(False, r.UNKNOWN_DAG, dag_id))
            elif not record.active:
                items.append(Item(True, r.UNCHANGED, dag_id))
            else:
                self._set_dag(replace(record, active=False), emit=True, now=now)
                items.append(Item(True, "", dag_id))
        return Result.of_items(items)

    def _set_import_errors(self, cmd: c.SetImportErrors, now: datetime, index: int) -> Result:
        errors = tuple(cmd.errors)
        if errors == self._import_errors:
            return Result(True, r.UNCHANGED)
        self._import_errors = errors
        rows = [sn.import_error_dict(e) for e in errors]
        self._emit(OutboxKind.IMPORT_ERRORS, {"errors": rows, "updated_at": sn.utc_iso(now)})
        return Result(True)

    def _set_paused(self, cmd: c.SetPaused, now: datetime, index: int) -> Result:
        record = self._dags.get(cmd.dag_id)
        if record is None:
            return Result(False, r.UNKNOWN_DAG)
        if record.paused == bool(cmd.paused):
            return Result(True, r.UNCHANGED)
        self._set_dag(replace(record, paused=bool(cmd.paused)), emit=True, now=now)
        if not cmd.paused:
            self._ready.unblock(cmd.dag_id)
        return Result(True)

    def _create_runs(self, cmd: c.CreateRuns, now: datetime, index: int) -> Result:
        return Result.of_items([self._create_run(d, now) for d in cmd.runs])

    def _create_run(self, d: c.RunDecision, now: datetime) -> Item:
        record = self._dags.get(d.dag_id)
        if record is None:
            return Item(False, r.UNKNOWN_DAG)
        if not record.active:
            return Item(False, r.INACTIVE_DAG)
        dates = (d.logical_date, d.data_interval_start, d.data_interval_end)
        if not all(_aware(x) for x in dates) or not isinstance(d.conf, dict):
            return Item(False, r.INVALID)
        try:
            run_type = RunType(d.run_type)
        except ValueError:
            return Item(False, r.INVALID)
        logical, start, end = (x.astimezone(UTC) for x in dates)
        scheduled = run_type is RunType.SCHEDULED
        run_id = d.run_id or f"{run_type.value}__{sn.utc_iso(logical)}"
        last = record.last_logical_date
        if (
            (d.dag_id, logical) in self._dates
            or run_id in self._runs.get(d.dag_id, {})
            or (scheduled and last is not None and logical <= last)
        ):
            if scheduled and (last is None or logical > last):  # the slot is taken: move on
                self._set_dag(replace(record, last_logical_date=logical), emit=False)
            return Item(False, r.RUN_EXISTS)
        if scheduled and record.paused:
            return Item(False, r.PAUSED)
        if scheduled and self.active_run_count(d.dag_id) >= record.spec.max_active_runs:
            return Item(False, r.MAX_ACTIVE_RUNS)
        spec = self._ref_spec(record.spec)
        run = DagRun(d.dag_id, run_id, logical, start, end, run_type, conf=dict(d.conf))
        run.created_at = now
        rec = _Run(run, spec, self._topologies[spec.spec_hash])
        for task in spec.tasks:
            ti = TaskInstance(TaskKey(d.dag_id, run_id, task.task_id))
            ti.max_tries = max(0, task.retries) + 1
            rec.tis[task.task_id] = ti
            self._dirty_tis[ti.key] = True  # new: nothing to subtract from the digest
        rec.unfinished = len(rec.tis)
        self._runs.setdefault(d.dag_id, {})[run_id] = rec
        self._dates[(d.dag_id, logical)] = run_id
        self._active_runs[d.dag_id] = self._active_runs.get(d.dag_id, 0) + 1
        self._dirty_runs[rec.key] = True
        if scheduled:
            self._set_dag(replace(record, last_logical_date=logical), emit=False)
        self._settle(rec, list(rec.tis), now)
        self._settle_run(rec, now)
        return Item(True, "", run_id)

    def _queue_tasks(self, cmd: c.QueueTasks, now: datetime, index: int) -> Result:
        items = []
        for decision in cmd.items:
            items.append(self._queue_one(decision, now))
        for key, state in cmd.unreachable:
            items.append(self._rule_out(key, state, now))
        return Result.of_items(items)

    def _queue_one(self, decision: c.QueueDecision, now: datetime) -> Item:
        found = self._find(decision.key)
        if found is None:
            return Item(False, r.UNKNOWN_TASK)
        rec, ti = found
        if ti.state != decision.expected_state or ti.try_number != decision.try_number:
            return Item(False, r.STATE_CHANGED)
        if ti.state is TaskState.UP_FOR_RETRY:
            assert ti.next_retry_at is not None
            if ti.next_retry_at > now:
                return Item(False, r.NOT_DUE)
        elif ti.state is TaskState.NONE:
            if self._verdict(rec, ti.key.task_id) is not Verdict.READY:
                return Item(False, r.NOT_READY)
        else:
            return Item(False, r.INVALID)
        self._queue(rec, ti, now)
        return Item(True)

    def _rule_out(self, key: TaskKey, state: TaskState, now: datetime) -> Item:
        found = self._find(key)
        if found is None:
            return Item(False, r.UNKNOWN_TASK)
        rec, ti = found
        if state not in (TaskState.UPSTREAM_FAILED, TaskState.SKIPPED):
            return Item(False, r.INVALID)
        if ti.state is not TaskState.NONE:
            return Item(False, r.STATE_CHANGED)
        if self._verdict(rec, key.task_id).value != state:
            return Item(False, r.NOT_READY)
        self._settle(rec, [key.task_id], now)
        self._settle_run(rec, now)
        return Item(True)

    def _lease_tasks(self, cmd: c.LeaseTasks, now: datetime, index: int) -> Result:
        if cmd.max_tasks < 0 or not cmd.lease_ttl_seconds > 0:
            return Result(False, r.INVALID)
        expires_at = now + timedelta(seconds=cmd.lease_ttl_seconds)
        grants = []
        while len(grants) < cmd.max_tasks:
            key = self._ready.pop(self._can_take)
            if key is None:
                break
            rec, ti = self._find(key) or (None, None)
            assert rec is not None and ti is not None
            self._touch_ti(ti)
            ti.try_number += 1
            ti.lease = Lease(key, ti.try_number, cmd.worker_id, index, expires_at)
            ti.worker_id, ti.lease_token = cmd.worker_id, index
            ti.start_date, ti.end_date, ti.exit_code, ti.message = now, None, None, ""
            ti.log_chunks = 0
            self._set_state(rec, ti, TaskState.RUNNING)
            self._expiry.push(expires_at, key)
            run = rec.run
            if run.state is RunState.QUEUED:
                self._touch_run(rec)
                run.state, run.start_date = RunState.RUNNING, now
            grants.append(
                LeaseGrant(
                    lease=ti.lease,
                    task=rec.topo.tasks[key.task_id],
                    fileloc=rec.spec.fileloc,
                    logical_date=run.logical_date,
                    data_interval_start=run.data_interval_start,
                    data_interval_end=run.data_interval_end,
                    conf=dict(run.conf),
                    max_tries=ti.max_tries,
                )
            )
        return Result(True, value=tuple(grants))

    def _heartbeat(self, cmd: c.HeartbeatLeases, now: datetime, index: int) -> Result:
        if not cmd.lease_ttl_seconds > 0:
            return Result(False, r.INVALID)
        items = []
        for ref in cmd.leases:
            reason, _, ti = self._current_lease(ref)
            if reason:
                items.append(Item(False, reason))
                continue
            assert ti is not None and ti.lease is not None
            lease = ti.lease
            if lease.worker_id != cmd.worker_id:
                items.append(Item(False, r.WRONG_WORKER))
                continue
            expires_at = max(lease.expires_at, now + timedelta(seconds=cmd.lease_ttl_seconds))
            if expires_at != lease.expires_at:
                self._touch_ti(ti, emit=False)
                ti.lease = replace(lease, expires_at=expires_at)
                self._expiry.push(expires_at, ti.key)
            items.append(Item(True, "", expires_at))
        return Result.of_items(items)

    def _complete(self, cmd: c.CompleteAttempt, now: datetime, index: int) -> Result:
        reason, rec, ti = self._current_lease(c.LeaseRef(cmd.key, cmd.token))
        if reason:
            return Result(False, reason)
        assert rec is not None and ti is not None
        if any(chunk.stream not in LOG_STREAMS for chunk in cmd.chunks):
            return Result(False, r.INVALID)
        self._append_logs(ti, cmd.chunks, now)
        self._touch_ti(ti)
        ti.end_date, ti.exit_code, ti.message = now, cmd.exit_code, cmd.message
        if cmd.success:
            self._finish_task(rec, ti, TaskState.SUCCESS, now)
        else:
            self._fail_attempt(rec, ti, now)
        return Result(True, value=ti.state)

    def _release(self, cmd: c.ReleaseLeases, now: datetime, index: int) -> Result:
        items = []
        for ref in cmd.leases:
            reason, rec, ti = self._current_lease(ref)
            if not reason and ti is not None and ti.lease and ti.lease.worker_id != cmd.worker_id:
                reason = r.WRONG_WORKER
            if reason:
                items.append(Item(False, reason))
                continue
            assert rec is not None and ti is not None
            self._touch_ti(ti)
            ti.try_number -= 1  # handed back unstarted: not an attempt
            ti.start_date = ti.worker_id = ti.lease_token = None
            self._set_state(rec, ti, TaskState.QUEUED)  # keeps its queued_at: front of line
            items.append(Item(True))
        return Result.of_items(items)

    def _expire(self, cmd: c.ExpireLeases, now: datetime, index: int) -> Result:
        items = []
        for ref in cmd.leases:
            reason, rec, ti = self._current_lease(ref)
            if not reason and ti is not None and ti.lease and ti.lease.expires_at > now:
                reason = r.NOT_EXPIRED
            if reason:
                items.append(Item(False, reason))
                continue
            assert rec is not None and ti is not None and ti.lease is not None
            self._touch_ti(ti)
            ti.end_date, ti.exit_code = now, None
            ti.message = f"lease expired (worker {ti.lease.worker_id})"
            self._fail_attempt(rec, ti, now)
            items.append(Item(True, "", ti.state))
        return Result.of_items(items)

    def _append(self, cmd: c.AppendLogs, now: datetime, index: int) -> Result:
        reason, _, ti = self._current_lease(c.LeaseRef(cmd.key, cmd.token))
        if reason:
            return Result(False, reason)
        assert ti is not None
        if any(chunk.stream not in LOG_STREAMS for chunk in cmd.chunks):
            return Result(False, r.INVALID)
        self._append_logs(ti, cmd.chunks, now)
        return Result(True, value=ti.log_chunks)

    def _run_and_tasks(
        self, dag_id: str, run_id: str, task_ids: Iterable[str]
    ) -> tuple[str, _Run | None, list[str]]:
        rec = self._runs.get(dag_id, {}).get(run_id)
        if rec is None:
            return r.UNKNOWN_RUN, None, []
        wanted = sorted(set(task_ids)) if task_ids else sorted(rec.tis)
        if any(t not in rec.tis for t in wanted):
            return r.UNKNOWN_TASK, rec, [t for t in wanted if t not in rec.tis]
        return "", rec, wanted

    def _clear(self, cmd: c.ClearTasks, now: datetime, index: int) -> Result:
        reason, rec, wanted = self._run_and_tasks(cmd.dag_id, cmd.run_id, cmd.task_ids)
        if reason:
            return Result(False, reason, tuple(wanted))
        assert rec is not None
        targets = sorted(rec.topo.descendants(wanted)) if cmd.include_downstream else wanted
        for task_id in targets:
            ti = rec.tis[task_id]
            self._touch_ti(ti)
            if ti.state is TaskState.RUNNING:  # revoke: its worker's next call is refused
                ti.end_date = now
                self._emit(
                    OutboxKind.TASK_INSTANCE,
                    sn.ti_row(ti, TaskState.FAILED, message="cleared while running"),
                )
            self._set_state(rec, ti, TaskState.NONE)
            ti.max_tries = ti.try_number + max(0, rec.topo.tasks[task_id].retries) + 1
            ti.next_retry_at = ti.queued_at = ti.start_date = ti.end_date = None
            ti.exit_code, ti.message, ti.log_chunks = None, "", 0
        self._reopen_run(rec)
        self._settle(rec, targets, now)
        self._settle_run(rec, now)
        return Result(True, value=tuple(targets))

    def _mark(self, cmd: c.MarkTasks, now: datetime, index: int) -> Result:
        state = cmd.state
        if state not in (TaskState.SUCCESS, TaskState.FAILED):
            return Result(False, r.INVALID)
        state = TaskState(state)
        reason, rec, wanted = self._run_and_tasks(cmd.dag_id, cmd.run_id, cmd.task_ids)
        if reason:
            return Result(False, reason, tuple(wanted))
        assert rec is not None
        for task_id in wanted:
            ti = rec.tis[task_id]
            if ti.state is state:
                continue
            self._touch_ti(ti)
            if ti.state not in sn.ATTEMPT_STATES:  # marking stands in for the coming attempt
                ti.try_number += 1
                ti.start_date = ti.worker_id = ti.lease_token = ti.exit_code = None
            ti.end_date, ti.next_retry_at = now, None
            ti.message = f"marked {state.value}"
            self._set_state(rec, ti, state)  # revokes a live lease
        for task_id in wanted:
            self._settle(rec, rec.topo.downstream[task_id], now)
        self._touch_run(rec)
        self._settle_run(rec, now)
        return Result(True, value=tuple(wanted))

    def _ack(self, cmd: c.AckMaterialized, now: datetime, index: int) -> Result:
        if cmd.seq > self._last_seq:
            return Result(False, r.ACK_BEYOND_LAST)
        if cmd.seq <= self._acked_seq:
            return Result(False, r.STALE_ACK)
        while self._outbox and self._outbox[0].seq <= cmd.seq:
            self._sum.remove(dg.fp_outbox(self._outbox.popleft()))
        self._acked_seq = cmd.seq
        cutoff = now - timedelta(seconds=max(0.0, cmd.finished_run_retention_seconds))
        evicted = 0
        for key in list(self._finished.pop_due(cutoff)):
            rec = self._runs[key[0]][key[1]]
            if rec.row_seq <= self._acked_seq:
                self._evict_run(rec)
                evicted += 1
            else:
                assert rec.run.end_date is not None
                self._finished.push(rec.run.end_date, key)
        return Result(True, value=evicted)

    def _batch(self, cmd: c.Batch, now: datetime, index: int) -> Result:
        results = tuple(self._apply(sub, index) for sub in cmd.commands)
        failed = next((res.reason for res in results if not res.ok), "")
        return Result(not failed, failed, results)

    # == read-only views =====================================================================

    @property
    def dags(self) -> Mapping[str, DagRecord]:
        return MappingProxyType(self._dags)

    def dag(self, dag_id: str) -> DagRecord | None:
        return self._dags.get(dag_id)

    def last_logical_date(self, dag_id: str) -> datetime | None:
        record = self._dags.get(dag_id)
        return None if record is None else record.last_logical_date

    def active_run_count(self, dag_id: str) -> int:
        """Runs of the DAG in QUEUED or RUNNING state."""
        return self._active_runs.get(dag_id, 0)

    def running_task_count(self, dag_id: str) -> int:
        return self._running_by_dag.get(dag_id, 0)

    def runs(self, dag_id: str | None = None) -> Iterator[DagRun]:
        """Runs held in memory (active ones, and finished ones until evicted)."""
        groups = self._runs.values() if dag_id is None else [self._runs.get(dag_id, {})]
        for group in groups:
            for rec in group.values():
                yield rec.run

    @property
    def run_count(self) -> int:
        return sum(len(group) for group in self._runs.values())

    def run(self, dag_id: str, run_id: str) -> DagRun | None:
        rec = self._runs.get(dag_id, {}).get(run_id)
        return None if rec is None else rec.run

    def run_spec(self, dag_id: str, run_id: str) -> DagSpec | None:
        """The DAG version the run executes."""
        rec = self._runs.get(dag_id, {}).get(run_id)
        return None if rec is None else rec.spec

    def task_instances(self, dag_id: str, run_id: str) -> list[TaskInstance]:
        rec = self._runs.get(dag_id, {}).get(run_id)
        return [] if rec is None else list(rec.tis.values())

    def task_instance(self, key: TaskKey) -> TaskInstance | None:
        found = self._find(key)
        return None if found is None else found[1]

    def leases(self) -> list[Lease]:
        """Live leases (one per RUNNING task instance)."""
        return [ti.lease for ti in self._running.values() if ti.lease is not None]

    @property
    def queued_count(self) -> int:
        return len(self._ready)

    @property
    def import_errors(self) -> tuple[ImportErrorRecord, ...]:
        return self._import_errors

    def expired_leases(self, now: datetime, limit: int | None = None) -> list[c.LeaseRef]:
        """Leases with expires_at <= now, earliest first (for an ExpireLeases proposal)."""
        refs = []
        for key in self._expiry.due(now, limit):
            lease = self._running[key].lease
            assert lease is not None
            refs.append(c.LeaseRef(key, lease.token))
        return refs

    def ready_to_queue(self, now: datetime, limit: int | None = None) -> list[c.QueueDecision]:
        """Retries whose next_retry_at <= now (for a QueueTasks proposal). Tasks whose trigger
        rule is met are queued by apply itself, so they never wait here."""
        out = []
        for key in self._retries.due(now, limit):
            ti = self.task_instance(key)
            assert ti is not None
            out.append(c.QueueDecision(key, TaskState.UP_FOR_RETRY, ti.try_number))
        return out

    def outbox_after(self, seq: int, limit: int) -> list[OutboxEntry]:
        start = max(0, seq - self._acked_seq)
        return list(islice(self._outbox, start, start + max(0, limit)))

    @property
    def outbox_acked_seq(self) -> int:
        return self._acked_seq

    @property
    def outbox_last_seq(self) -> int:
        return self._last_seq

    @property
    def outbox_size(self) -> int:
        return len(self._outbox)

    # == digest, snapshot, restore ===========================================================

    def digest(self) -> str:
        """Equal states give equal digests (O(1): maintained by apply)."""
        return self._finish_digest(self._sum.value)

    def recompute_digest(self) -> str:
        """The digest rebuilt from every entity (O(state)); equals :meth:`digest`."""
        return self._finish_digest(self._entity_sum())

    def _finish_digest(self, total: int) -> str:
        errors = tuple((e.fileloc, e.message, e.traceback) for e in self._import_errors)
        scalars = (sn.SCHEMA_VERSION, self.applied_index, self._acked_seq, self._last_seq)
        return dg.finish(total, scalars, errors)

    def _entity_sum(self) -> int:
        acc = dg.DigestSum()
        for dag_id, record in self._dags.items():
            acc.add(dg.fp_dag(dag_id, record))
        for group in self._runs.values():
            for rec in group.values():
                acc.add(dg.fp_run(rec.run, rec.spec.spec_hash, rec.row_seq))
                for ti in rec.tis.values():
                    acc.add(dg.fp_ti(ti))
        for entry in self._outbox:
            acc.add(dg.fp_outbox(entry))
        for request_id, result in self._dedup.items():
            acc.add(dg.fp_request(request_id, result))
        return acc.value

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able dict of the whole state (share nothing mutable with it: serialize it)."""
        return {
            "schema_version": sn.SCHEMA_VERSION,
            "applied_index": self.applied_index,
            "specs": {h: spec.to_dict() for h, spec in self._specs.items()},
            "dags": [sn.dag_record_to_dict(record) for record in self._dags.values()],
            "runs": [
                sn.run_to_dict(
                    rec.run,
                    rec.spec.spec_hash,
                    rec.row_seq,
                    [sn.ti_to_dict(ti) for ti in rec.tis.values()],
                )
                for group in self._runs.values()
                for rec in group.values()
            ],
            "import_errors": [sn.import_error_dict(e) for e in self._import_errors],
            "outbox": {
                "acked_seq": self._acked_seq,
                "last_seq": self._last_seq,
                "entries": [[e.seq, e.kind.value, e.data] for e in self._outbox],
            },
            "dedup": [[rid, sn.encode_value(res)] for rid, res in self._dedup.items()],
        }

    @classmethod
    def restore(cls, data: Mapping[str, Any]) -> SchedulerState:
        version = data.get("schema_version")
        if not isinstance(version, int):
            raise ValueError("not a raftsched state snapshot: no integer schema_version")
        if version > sn.SCHEMA_VERSION:
            raise SnapshotVersionError(version, sn.SCHEMA_VERSION)
        state = cls()
        state.applied_index = int(data["applied_index"])
        specs = {h: DagSpec.from_dict(d) for h, d in data["specs"].items()}
        for spec in specs.values():  # same order as the snapshotted state
            state._specs[spec.spec_hash] = spec
            state._topologies[spec.spec_hash] = Topology(spec)
            state._spec_refs[spec.spec_hash] = 0
        for item in data["dags"]:
            record = sn.dag_record_from_dict(item, specs)
            state._dags[record.spec.dag_id] = record
            state._ref_spec(record.spec)
        for item in data["runs"]:
            state._restore_run(item)
        state._import_errors = tuple(ImportErrorRecord(**e) for e in data["import_errors"])
        outbox = data["outbox"]
        state._acked_seq, state._last_seq = int(outbox["acked_seq"]), int(outbox["last_seq"])
        state._outbox = deque(
            OutboxEntry(int(seq), OutboxKind(kind), entry) for seq, kind, entry in outbox["entries"]
        )
        state._dedup = OrderedDict((rid, sn.decode_value(res)) for rid, res in data["dedup"])
        state._sum.value = state._entity_sum()
        return state

    def _restore_run(self, item: dict[str, Any]) -> None:
        run = sn.run_from_dict(item)
        spec = self._ref_spec(self._specs[item["spec_hash"]])
        rec = _Run(run, spec, self._topologies[spec.spec_hash])
        rec.row_seq = int(item["row_seq"])
        self._runs.setdefault(run.dag_id, {})[run.run_id] = rec
        self._dates[(run.dag_id, run.logical_date)] = run.run_id
        if run.state in FINISHED_RUN_STATES:
            self._n_finished_runs += 1
            assert run.end_date is not None
            self._finished.push(run.end_date, rec.key)
        else:
            self._active_runs[run.dag_id] = self._active_runs.get(run.dag_id, 0) + 1
        for ti_data in item["tis"]:
            ti = sn.ti_from_dict(ti_data, run.dag_id, run.run_id)
            state, ti.state = ti.state, TaskState.NONE
            rec.tis[ti.key.task_id] = ti
            rec.unfinished += 1
            self._set_state(rec, ti, state)  # rebuilds queue, lease and retry indexes
            if ti.lease is not None:
                self._expiry.push(ti.lease.expires_at, ti.key)

    def __reduce__(self) -> tuple[Callable[..., SchedulerState], tuple[dict[str, Any]]]:
        """Pickling (pysyncobj's snapshots) goes through the versioned snapshot dict."""
        return (SchedulerState.restore, (self.snapshot(),))


_HANDLERS: dict[type, Callable[[SchedulerState, Any, datetime, int], Result]] = {
    c.RegisterDags: SchedulerState._register_dags,
    c.RemoveDags: SchedulerState._remove_dags,
    c.SetImportErrors: SchedulerState._set_import_errors,
    c.SetPaused: SchedulerState._set_paused,
    c.CreateRuns: SchedulerState._create_runs,
    c.QueueTasks: SchedulerState._queue_tasks,
    c.LeaseTasks: SchedulerState._lease_tasks,
    c.HeartbeatLeases: SchedulerState._heartbeat,
    c.CompleteAttempt: SchedulerState._complete,
    c.ReleaseLeases: SchedulerState._release,
    c.ExpireLeases: SchedulerState._expire,
    c.AppendLogs: SchedulerState._append,
    c.ClearTasks: SchedulerState._clear,
    c.MarkTasks: SchedulerState._mark,
    c.AckMaterialized: SchedulerState._ack,
    c.Batch: SchedulerState._batch,
}
