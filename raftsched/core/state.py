"""SchedulerState: the replicated state machine. ``apply`` is its only mutator.

Deterministic: apply reads no clock (time is ``command.now``), no randomness, no I/O; the
fencing token of a lease is the Raft log index passed in by the caller. Each decision is
re-checked at apply (compare-and-set), so a stale or duplicate proposal is a no-op with a
reason (``core.results``). Consequences that need no clock happen inside apply: a new run
queues its root tasks, a finished attempt queues (or rules out) its downstream tasks and
settles the run. Time-driven transitions (retries coming due, lease expiry) need a command:
the leader reads :meth:`ready_to_queue` / :meth:`expired_leases` and proposes them.

This module holds the data, the read views, the request-id memory, digest and snapshots,
and the dispatch from command type to handler. The handlers are plain functions taking the
state, by concept: ``handlers_dags`` (register, remove, import errors, pause),
``handlers_runs`` (create runs, eviction on ack; the run policies are written there),
``handlers_tasks`` (queue, lease, heartbeat, complete, release, expire, logs, clear, mark);
``transitions`` keeps the derived indexes right as task instances and runs change state, and
``outbox`` tracks changes for the digest and the outbox. The ``_`` attributes below are
private to ``raftsched.core``: those modules read and write them, nothing else does.

Total and atomic (the rule every handler keeps). Whatever reached the log is replayed on every
node at every restart, so apply never raises and each command applies completely or changes
nothing (state, outbox, digest, request-id memory):

1. ``core.validate.check_command`` checks every field of the command against the bounds of
   ``core.limits`` before anything changes. A refused command answers INVALID with the
   message; it changes nothing, and is not remembered (a repeat is refused the same way).
2. A handler re-checks each decision's precondition against the current state *before* its
   first change to that decision; a refusal (a reason in the result) changes nothing of it.
   Commands of many decisions refuse decision by decision (``Result.value`` items).
3. After the checks a handler cannot fail on any input. If one raises all the same, that is a
   bug: the state records it in :attr:`SchedulerState.halted` and from then on refuses every
   command with HALTED, changing nothing, on every replica alike (they all applied the same
   log). The node says so in ``cluster status``; running on from a half-applied command would
   be worse, because it would diverge silently.

Digests and fingerprints never recurse on user data (``core.digest.canonical`` walks with an
explicit stack), and ``core.limits`` walks JSON the same way.

Not thread-safe: readers must not run concurrently with apply (pysyncobj applies on its tick
thread; read there or under the node's lock).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from itertools import islice
from types import MappingProxyType
from typing import Any

from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import handlers_dags as hd
from raftsched.core import handlers_runs as hr
from raftsched.core import handlers_secrets as hs
from raftsched.core import handlers_tasks as ht
from raftsched.core import results as r
from raftsched.core import snapshot as sn
from raftsched.core.handlers_dags import ref_spec
from raftsched.core.handlers_tasks import LOG_STREAMS
from raftsched.core.model import (
    FINISHED_RUN_STATES,
    DagRecord,
    DagRun,
    DagSpec,
    ImportErrorRecord,
    Lease,
    OutboxEntry,
    OutboxKind,
    TaskInstance,
    TaskKey,
    TaskState,
)
from raftsched.core.outbox import flush, log_chars
from raftsched.core.ready import ReadyQueue, TimeIndex, Topology
from raftsched.core.results import Result
from raftsched.core.transitions import LiveRun, RunKey, find, set_state
from raftsched.core.validate import check_command
from raftsched.errors import SnapshotVersionError

__all__ = ["DEDUP_CAPACITY", "LOG_STREAMS", "RunKey", "SchedulerState"]

DEDUP_CAPACITY = 10_000  # request ids remembered (FIFO); part of the snapshot
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SchedulerState:
    def __init__(self) -> None:
        self.applied_index = 0
        self._specs: dict[str, DagSpec] = {}  # by spec_hash: current DAG versions + run versions
        self._spec_refs: dict[str, int] = {}
        self._topologies: dict[str, Topology] = {}
        self._dags: dict[str, DagRecord] = {}
        self._runs: dict[str, dict[str, LiveRun]] = {}  # dag_id -> run_id -> run
        self._dates: dict[tuple[str, datetime], str] = {}  # (dag_id, logical_date) -> run_id
        # Slots of runs evicted in the last hour -> when (handlers_runs.EVICTED_SLOT_MEMORY)
        self._evicted_slots: dict[tuple[str, datetime], datetime] = {}
        # Tasks cleared or marked while they ran -> when their revoked lease ends; they are not
        # leased again before (handlers_tasks.fence)
        self._fences: dict[TaskKey, datetime] = {}
        self._active_runs: dict[str, int] = {}
        self._running: dict[TaskKey, TaskInstance] = {}
        self._running_by_dag: dict[str, int] = {}
        self._n_retry = 0
        self._n_finished_runs = 0
        self._ready = ReadyQueue()
        self._retries: TimeIndex[TaskKey] = TimeIndex(self._retry_live)
        self._expiry: TimeIndex[TaskKey] = TimeIndex(self._lease_live)
        self._finished: TimeIndex[RunKey] = TimeIndex(self._finished_live)
        # Finished runs kept on slots their DAG's scheduler has yet to reach, per DAG (see
        # handlers_runs); derived, not in snapshots: after a restore the next ack parks them.
        self._parked: dict[str, dict[RunKey, None]] = {}
        self._import_errors: tuple[ImportErrorRecord, ...] = ()
        self._outbox: deque[OutboxEntry] = deque()
        self._acked_seq = 0
        self._last_seq = 0
        self._outbox_log_chars = 0  # derived (outbox.log_chars), for the hard cap
        self._dedup: OrderedDict[str, Result] = OrderedDict()
        self._sum = dg.DigestSum()
        # Entities changed by the command being applied: key -> write an outbox row?
        self._dirty_tis: dict[TaskKey, bool] = {}
        self._dirty_runs: dict[RunKey, bool] = {}
        self._dirty_dags: set[str] = set()
        # Set when a handler raised (a bug): what failed. From then on apply changes nothing,
        # on every replica alike, until a release with the fix replays the log.
        self.halted: str | None = None
        # The latest command time applied (commands' ``now`` raised to it): the state's clock
        self._clock = _EPOCH
        # Variables and connections, as Fernet tokens only (handlers_secrets)
        self._secrets: dict[hs.SecretKey, hs.SecretRecord] = {}

    # == apply ===============================================================================

    def apply(self, command: c.Command, *, log_index: int) -> Result:
        """Apply one committed command at Raft index ``log_index`` (> applied_index).

        Never raises. Once :attr:`halted`, answers HALTED and changes nothing at all.
        """
        if self.halted is not None:
            return Result(False, r.HALTED, self.halted)
        if log_index <= self.applied_index:
            return Result(False, r.STALE_INDEX)
        self.applied_index = log_index
        return self._apply(command, log_index)

    def _apply(self, command: c.Command, log_index: int) -> Result:
        if self.halted is not None:  # a sub-command of this batch hit a bug
            return Result(False, r.HALTED, self.halted)
        if type(command) not in _HANDLERS:  # e.g. a newer release's command: changes nothing
            return Result(False, r.UNKNOWN_COMMAND, type(command).__name__)
        try:
            check_command(command)
        except Exception as err:  # LimitExceeded, or a malformed value (say, a list where a
            # string belongs) that a check tripped over: either way nothing changed
            return Result(False, r.INVALID, str(err) or type(err).__name__)
        if isinstance(command, c.Batch) and not command.commands:
            # a barrier (a new leader's first commit, a read-index round trip): it changes
            # nothing, so it takes no place in the request-id memory
            return Result(True, value=())
        seen = self._dedup.get(command.request_id)
        if seen is not None:
            return replace(seen, duplicate=True)
        handler = _HANDLERS[type(command)]
        # One time source that never goes backwards: commands are stamped by whichever node
        # proposed them (the leader for its own decisions), and clocks differ between nodes
        # and leaders; a lease is granted, extended and expired on this one clock.
        now = max(command.now.astimezone(UTC), self._clock)
        self._clock = now
        try:
            result = handler(self, command, now, log_index)
            if self.halted is not None:
                return Result(False, r.HALTED, self.halted)
            if result.reason == r.OUTBOX_FULL:  # refused before any change: nothing to remember
                return result
            flush(self)
            self._prune()
        except Exception as exc:  # a bug: stop here rather than run on half-applied
            self.halted = (
                f"{type(command).__name__} {command.request_id} at log index {log_index}:"
                f" {type(exc).__name__}: {str(exc)[:500]}"
            )
            return Result(False, r.INTERNAL_ERROR, self.halted)
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

    def _prune(self) -> None:
        self._retries.prune(self._n_retry)
        self._expiry.prune(len(self._running))
        self._finished.prune(self._n_finished_runs)

    # -- index validity ---------------------------------------------------------------------

    def _retry_live(self, key: TaskKey, when: datetime) -> bool:
        found = find(self, key)
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
        found = find(self, key)
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

    def secret_records(self, kind: str) -> dict[str, hs.SecretRecord]:
        """Variables or connections (``kind``) by name: ciphertext only (handlers_secrets)."""
        return {key: rec for (k, key), rec in self._secrets.items() if k == kind}

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

    @property
    def outbox_log_chars(self) -> int:
        return self._outbox_log_chars

    # == digest, snapshot, restore ===========================================================

    def digest(self) -> str:
        """Equal states give equal digests (O(1): maintained by apply)."""
        return self._finish_digest(self._sum.value)

    def recompute_digest(self) -> str:
        """The digest rebuilt from every entity (O(state)); equals :meth:`digest`."""
        return self._finish_digest(self._entity_sum())

    def _finish_digest(self, total: int) -> str:
        errors = tuple((e.fileloc, e.message, e.traceback) for e in self._import_errors)
        scalars = (
            sn.SCHEMA_VERSION,
            self.applied_index,
            self._acked_seq,
            self._last_seq,
            self._clock.isoformat(),
        )
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
        for slot, when in self._evicted_slots.items():
            acc.add(dg.fp_slot(slot, when))
        for key, until in self._fences.items():
            acc.add(dg.fp_fence(key, until))
        for ref, secret in self._secrets.items():
            acc.add(hs.fp_secret(ref, secret))
        return acc.value

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able dict of the whole state (share nothing mutable with it: serialize it)."""
        data = self._snapshot()
        if self._secrets:  # only then: a state without any snapshots as before
            data["schema_version"] = sn.SECRETS_SCHEMA_VERSION
            data["secrets"] = hs.secrets_to_list(self._secrets)
        return data

    def _snapshot(self) -> dict[str, Any]:
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
            "halted": self.halted,
            "clock": sn.utc_iso(self._clock),
            "evicted_slots": [
                [dag_id, sn.utc_iso(logical), sn.utc_iso(when)]
                for (dag_id, logical), when in self._evicted_slots.items()
            ],
            "fences": [
                [key.dag_id, key.run_id, key.task_id, sn.utc_iso(until)]
                for key, until in self._fences.items()
            ],
        }

    @classmethod
    def restore(cls, data: Mapping[str, Any]) -> SchedulerState:
        version = data.get("schema_version")
        if not isinstance(version, int):
            raise ValueError("not a raftsched state snapshot: no integer schema_version")
        if version > sn.SCHEMA_VERSION and not sn.readable_with_secrets(version, data):
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
            ref_spec(state, record.spec)
        for item in data["runs"]:
            state._restore_run(item)
        state._import_errors = tuple(ImportErrorRecord(**e) for e in data["import_errors"])
        outbox = data["outbox"]
        state._acked_seq, state._last_seq = int(outbox["acked_seq"]), int(outbox["last_seq"])
        state._outbox = deque(
            OutboxEntry(int(seq), OutboxKind(kind), entry) for seq, kind, entry in outbox["entries"]
        )
        state._outbox_log_chars = sum(log_chars(e) for e in state._outbox)
        state._dedup = OrderedDict((rid, sn.decode_value(res)) for rid, res in data["dedup"])
        state.halted = data.get("halted")
        state._clock = sn.parse_utc(data.get("clock")) or _EPOCH
        state._evicted_slots = {
            (dag_id, sn.parse_utc(logical)): sn.parse_utc(when)
            for dag_id, logical, when in data.get("evicted_slots", ())
        }
        state._fences = {
            TaskKey(dag_id, run_id, task_id): sn.parse_utc(until)
            for dag_id, run_id, task_id, until in data.get("fences", ())
        }
        state._secrets = hs.secrets_from_list(data.get("secrets"))
        state._sum.value = state._entity_sum()
        return state

    def _restore_run(self, item: dict[str, Any]) -> None:
        run = sn.run_from_dict(item)
        spec = ref_spec(self, self._specs[item["spec_hash"]])
        rec = LiveRun(run, spec, self._topologies[spec.spec_hash])
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
            set_state(self, rec, ti, state)  # rebuilds queue, lease and retry indexes
            if ti.lease is not None:
                self._expiry.push(ti.lease.expires_at, ti.key)

    def __reduce__(self) -> tuple[Callable[..., SchedulerState], tuple[dict[str, Any]]]:
        """Pickling (pysyncobj's snapshots) goes through the versioned snapshot dict."""
        return (SchedulerState.restore, (self.snapshot(),))


def _apply_batch(state: SchedulerState, cmd: c.Batch, now: datetime, index: int) -> Result:
    results = tuple(state._apply(sub, index) for sub in cmd.commands)
    failed = next((res.reason for res in results if not res.ok), "")
    return Result(not failed, failed, results)


_HANDLERS: dict[type, Callable[[SchedulerState, Any, datetime, int], Result]] = {
    c.RegisterDags: hd.apply_register_dags,
    c.RemoveDags: hd.apply_remove_dags,
    c.SetImportErrors: hd.apply_set_import_errors,
    c.SetPaused: hd.apply_set_paused,
    c.CreateRuns: hr.apply_create_runs,
    c.QueueTasks: ht.apply_queue_tasks,
    c.LeaseTasks: ht.apply_lease_tasks,
    c.HeartbeatLeases: ht.apply_heartbeat_leases,
    c.CompleteAttempt: ht.apply_complete_attempt,
    c.ReleaseLeases: ht.apply_release_leases,
    c.ExpireLeases: ht.apply_expire_leases,
    c.AppendLogs: ht.apply_append_logs,
    c.ClearTasks: ht.apply_clear_tasks,
    c.MarkTasks: ht.apply_mark_tasks,
    c.AckMaterialized: hr.apply_ack_materialized,
    c.SetSecret: hs.apply_set_secret,
    c.DeleteSecret: hs.apply_delete_secret,
    c.Batch: _apply_batch,
}
