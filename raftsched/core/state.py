"""SchedulerState: the replicated state machine. ``apply`` is its only mutator.

Deterministic: apply reads no clock (time is ``command.now``), no randomness, no I/O; the
fencing token of a lease is the Raft log index passed in by the caller. Each decision is
re-checked at apply (compare-and-set), so a stale or duplicate proposal is a no-op with a
reason (``core.results``). Consequences that need no clock happen inside apply: a new run
queues its root tasks, a finished attempt queues (or rules out) its downstream tasks and
settles the run. Time-driven transitions (retries coming due, lease expiry) need a command:
the leader reads :meth:`ready_to_queue` / :meth:`expired_leases` and proposes them.

Each invariant has one owner, a small class in its own module that the state holds:
``catalog.DagCatalog`` (DAG records, specs and topologies, import errors),
``run_table.RunTable`` (live runs, the slot index, evicted slots, finished runs),
``task_queue.TaskQueue`` (ready queue, running set and leases, retries, fences),
``outbox.Outbox`` (entries, seqs, the hard cap), ``changes.ChangeSet`` (what the command
being applied changed), ``secret_table.SecretTable``, ``callback_table.CallbackTable``
(callback jobs), ``trigger_table.TriggerTable`` (deferred tasks), ``audit.AuditLog`` (who
changed what), ``asset_table.AssetTable`` and ``request_memory.RequestMemory``.
Owners that hold entities add and remove their digest shares in the one ``DigestSum``.
This module keeps dispatch (validate, dedup, then the handler), the digest and snapshots;
``state_views`` holds the read views. The handlers are plain functions taking the state, by
concept: ``handlers_dags`` (register, remove, import errors, pause), ``handlers_runs``
(create runs, eviction on ack; the run policies are written there), ``handlers_tasks``
(queue, lease, heartbeat, complete, release, expire, logs, clear, mark),
``handlers_secrets``; ``transitions`` moves task instances and runs between states. They
call the owners' methods; the ``_`` attributes of the state are its own.

Total and atomic (docs/architecture.md §3, the rule every handler keeps): apply never raises,
and each command applies completely or changes nothing. ``core.validate.check_command``
checks every field first (INVALID, nothing changed, not remembered); a handler re-checks each
decision's precondition before its first change to that decision; a handler that raises all
the same is a bug: the state records it in :attr:`SchedulerState.halted` and refuses every
later command with HALTED, on every replica alike, rather than run on half-applied.

Not thread-safe: read on pysyncobj's tick thread or under the node's lock, never during apply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from raftsched.core import audit, restore_decode, snapshot_share
from raftsched.core import commands as c
from raftsched.core import digest as dg
from raftsched.core import model as _model
from raftsched.core import results as r
from raftsched.core import run_timeout as rt
from raftsched.core import snapshot as sn
from raftsched.core import versions as vs
from raftsched.core.asset_table import AssetTable
from raftsched.core.callback_table import CallbackTable
from raftsched.core.catalog import DagCatalog
from raftsched.core.changes import ChangeFeed, ChangeSet, flush
from raftsched.core.command_table import HANDLERS as _HANDLERS
from raftsched.core.handlers_tasks import LOG_STREAMS
from raftsched.core.model import FINISHED_RUN_STATES, ImportErrorRecord, TaskKey, TaskState
from raftsched.core.outbox import Outbox
from raftsched.core.pool_table import PoolTable
from raftsched.core.request_memory import DEDUP_CAPACITY, RequestMemory
from raftsched.core.restore_decode import RestoreDecoder
from raftsched.core.results import Result
from raftsched.core.run_table import LiveRun, RunKey, RunTable
from raftsched.core.secret_table import SecretTable, fp_secret
from raftsched.core.snapshot_share import SnapshotShare
from raftsched.core.state_views import StateViews
from raftsched.core.task_queue import TaskQueue
from raftsched.core.transitions import set_state, settle, settle_run
from raftsched.core.trigger_table import TriggerTable
from raftsched.core.validate import check_command
from raftsched.errors import ReleaseTooOld, SnapshotVersionError

# Entries pickled by an older release lack the fields added since: they take their defaults.
vs.install_tolerant_unpickling((c, _model, rt))

__all__ = ["DEDUP_CAPACITY", "LOG_STREAMS", "RunKey", "SchedulerState"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SchedulerState(StateViews):
    def __init__(self) -> None:
        self.applied_index = 0
        self._sum = dg.DigestSum()  # the digest's sum: each owner below adds its shares
        self.catalog = DagCatalog()
        self.run_table = RunTable(self._sum)
        self.task_queue = TaskQueue(self._sum, self.task_instance)
        self.outbox = Outbox(self._sum)
        self.changes = ChangeSet(self._sum)
        self.change_feed = ChangeFeed()  # for readers' copies, not replicated
        self.secrets = SecretTable(self._sum)
        self.callbacks = CallbackTable(self._sum)
        self.triggers = TriggerTable(self._sum)
        self.audit = audit.AuditLog(self._sum)  # who changed what (core/audit.py)
        self.pools = PoolTable(self._sum)  # pools and their slots in use (core/pool_table.py)
        self.assets = AssetTable(self._sum)  # asset events and consumers' queues (§21)
        self._dedup = RequestMemory(self._sum)
        self.halted: str | None = None  # a handler raised (a bug): what failed (§3, apply)
        self._clock = _EPOCH  # the latest command time applied (``now`` raised to it)
        # The newest release whose commands every node can apply (core/versions.py); raised
        # only by SetClusterVersion. At FIRST_RELEASE (1: release 1 had none) it is in no
        # digest and no snapshot, so a state is the same as every older release's; past it,
        # in both (the same on every release that knows it).
        self.cluster_version = vs.FIRST_RELEASE

    def remembers(self, request_id: str) -> bool:
        """Whether a command with this request id was applied (its result is remembered)."""
        return self._dedup.get(request_id) is not None

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
            audit.record(self, command, result, now, log_index)
            flush(self)
            self.task_queue.prune()
            self.run_table.prune()
        except Exception as exc:  # a bug: stop here rather than run on half-applied
            self.change_feed.lose_track()
            self.halted = (
                f"{type(command).__name__} {command.request_id} at log index {log_index}:"
                f" {type(exc).__name__}: {str(exc)[:500]}"
            )
            return Result(False, r.INTERNAL_ERROR, self.halted)
        self._dedup.remember(command.request_id, result)
        return result

    # == maintenance ========================================================================

    def settle_live_runs(self, now: datetime) -> int:
        """Queue what is ready and finish runs whose tasks all finished, in every unfinished
        run, as apply would have (``store rebuild`` after restoring a snapshot); the number
        of outbox entries written. Not a command: only for a state no node runs yet."""
        before = self.outbox.last_seq
        for rec in list(self.run_table.records()):
            if rec.run.state not in FINISHED_RUN_STATES:
                settle(self, rec, list(rec.tis), now)
                settle_run(self, rec, now)
        flush(self)
        return self.outbox.last_seq - before

    # == digest, snapshot, restore ===========================================================

    clock = property(lambda self: self._clock)  # newest command time applied (leader_gap)

    def digest(self) -> str:
        """Equal states give equal digests (O(1): maintained by apply)."""
        return self._finish_digest(self._sum.value)

    def recompute_digest(self) -> str:
        """The digest rebuilt from every entity (O(state)); equals :meth:`digest`."""
        return self._finish_digest(self._entity_sum())

    def _finish_digest(self, total: int) -> str:
        errors = tuple((e.fileloc, e.message, e.traceback) for e in self.catalog.import_errors)
        scalars = (
            sn.SCHEMA_VERSION,
            self.applied_index,
            self.outbox.acked_seq,
            self.outbox.last_seq,
            self._clock.isoformat(),
        )
        if self.cluster_version > vs.FIRST_RELEASE:
            scalars += (self.cluster_version,)
        return dg.finish(total, scalars, errors)

    def _entity_sum(self, outbox_share: int | None = None) -> int:
        """The entities' sum; ``outbox_share``: the outbox's, when known (see Outbox.load)."""
        acc = dg.DigestSum()
        for dag_id, record in self.catalog.records.items():
            acc.add(dg.fp_dag(dag_id, record))
        for rec in self.run_table.records():
            acc.add(dg.fp_run(rec.run, rec.spec.spec_hash, rec.row_seq))
            for ti in rec.tis.values():
                acc.add(dg.fp_ti(ti))
        if outbox_share is not None:
            acc.value = (acc.value + outbox_share) % dg.MOD
        for entry in self.outbox if outbox_share is None else ():
            acc.add(dg.fp_outbox(entry))
        for request_id, result in self._dedup.items():
            acc.add(dg.fp_request(request_id, result))
        for slot, when in self.run_table.evicted_slots():
            acc.add(dg.fp_slot(slot, when))
        for key, until in self.task_queue.fences():
            acc.add(dg.fp_fence(key, until))
        for ref, secret in self.secrets.items():
            acc.add(fp_secret(ref, secret))
        for fingerprint in (
            *self.callbacks.fingerprints(),
            *self.triggers.fingerprints(),
            *self.audit.fingerprints(),
            *self.pools.fingerprints(),
            *self.assets.fingerprints(),
        ):
            acc.add(fingerprint)
        return acc.value

    @sn.without_gc  # it allocates a container per record: collections would walk the state
    def snapshot(self) -> dict[str, Any]:
        """A JSON-able dict of the whole state (share nothing mutable with it: serialize it)."""
        data = self._snapshot()
        if self.secrets:  # only then: a state without any snapshots as before
            data["schema_version"] = sn.SECRETS_SCHEMA_VERSION
            data["secrets"] = self.secrets.to_list()
        tables = {"callbacks": self.callbacks, "triggers": self.triggers, "assets": self.assets}
        for name, table in tables.items():
            if table:  # only then: a state without any snapshots as before
                data[name] = table.to_dict()
        for name, held in (("audit", self.audit), ("pools", self.pools)):
            if held:  # only once the cluster runs release 3 (core/audit.py, pool_table.py)
                data[name] = held.to_list()
        if self.cluster_version > vs.FIRST_RELEASE:  # a release-1 node refuses this one
            data["schema_version"] = vs.SNAPSHOT_SCHEMA_VERSION
            data["cluster_version"] = self.cluster_version
        return data

    def _snapshot(self) -> dict[str, Any]:
        share = SnapshotShare()  # equal strings one object: pickled once (snapshot_share)
        specs = snapshot_share.spec_dicts(self.catalog.specs, share)
        return {
            "schema_version": sn.SCHEMA_VERSION,
            "applied_index": self.applied_index,
            "specs": specs,
            "dags": [
                share.row(sn.dag_record_to_dict(record, share.iso))
                for record in self.catalog.records.values()
            ],
            "runs": [
                share.row(
                    sn.run_to_dict(
                        rec.run,
                        rec.spec.spec_hash,
                        rec.row_seq,
                        [sn.ti_to_dict(ti, share) for ti in rec.tis.values()],
                    )
                )
                for rec in self.run_table.records()
            ],
            "import_errors": [sn.import_error_dict(e) for e in self.catalog.import_errors],
            "outbox": {
                "acked_seq": self.outbox.acked_seq,
                "last_seq": self.outbox.last_seq,
                "entries": snapshot_share.outbox_entries(self.outbox, specs, share),
                "digest_share": f"{self.outbox.digest_share:032x}",  # see Outbox.load
            },
            "dedup": [[rid, sn.encode_value(res)] for rid, res in self._dedup.items()],
            "halted": self.halted,
            "clock": sn.utc_iso(self._clock),
            "evicted_slots": [
                [dag_id, sn.utc_iso(logical), sn.utc_iso(when)]
                for (dag_id, logical), when in self.run_table.evicted_slots()
            ],
            "fences": [
                [key.dag_id, key.run_id, key.task_id, sn.utc_iso(until)]
                for key, until in self.task_queue.fences()
            ],
        }

    @classmethod
    @sn.without_gc
    def restore(cls, data: Mapping[str, Any]) -> SchedulerState:
        version = data.get("schema_version")
        if not isinstance(version, int):
            raise ValueError("not a raftsched state snapshot: no integer schema_version")
        if (
            version > sn.SCHEMA_VERSION
            and not sn.readable_with_secrets(version, data)
            and version != vs.SNAPSHOT_SCHEMA_VERSION
        ):
            raise SnapshotVersionError(version, vs.SNAPSHOT_SCHEMA_VERSION)
        cluster_version = int(data.get("cluster_version", vs.FIRST_RELEASE))
        if cluster_version > vs.RELEASE:
            raise ReleaseTooOld(cluster_version, vs.RELEASE)
        state = cls()
        state.applied_index = int(data["applied_index"])
        decode = RestoreDecoder()  # equal values of many DAGs: built and held once
        specs = {h: decode.spec(d) for h, d in data["specs"].items()}
        records = [decode.record(item, specs) for item in data["dags"]]
        state.catalog.load(specs.values(), records)  # same order as the snapshotted state
        for item in data["runs"]:
            state._restore_run(item, decode)
        errors = tuple(ImportErrorRecord(**e) for e in data["import_errors"])
        state.catalog.import_errors = errors
        outbox = data["outbox"]
        state.outbox.load(
            int(outbox["acked_seq"]),
            int(outbox["last_seq"]),
            restore_decode.outbox_entries(outbox["entries"]),
            sn.outbox_share(outbox),
        )
        state._dedup.load((rid, restore_decode.result(res)) for rid, res in data["dedup"])
        state.halted = data.get("halted")
        state._clock = sn.parse_utc(data.get("clock")) or _EPOCH
        state.run_table.load_slots(
            ((dag_id, sn.parse_utc(logical)), sn.parse_utc(when))
            for dag_id, logical, when in data.get("evicted_slots", ())
        )
        state.task_queue.load_fences(
            (TaskKey(dag_id, run_id, task_id), sn.parse_utc(until))
            for dag_id, run_id, task_id, until in data.get("fences", ())
        )
        for name in ("secrets", "callbacks", "triggers", "audit", "pools", "assets"):
            getattr(state, name).load(data.get(name))
        state.cluster_version = cluster_version
        state._sum.value = state._entity_sum(state.outbox.digest_share)
        return state

    def _restore_run(self, item: dict[str, Any], decode: RestoreDecoder) -> None:
        run = decode.run(item)
        spec = self.catalog.ref_spec(self.catalog.specs[item["spec_hash"]])
        rec = LiveRun(run, spec, self.catalog.topology(spec.spec_hash))
        rec.row_seq = int(item["row_seq"])
        self.run_table.add(rec)
        for ti_data in item["tis"]:
            ti = decode.task_instance(ti_data, run.dag_id, run.run_id)
            state, ti.state = ti.state, TaskState.NONE
            rec.tis[ti.key.task_id] = ti
            rec.unfinished += 1
            set_state(self, rec, ti, state)  # rebuilds queue, lease and retry indexes
            if ti.lease is not None:
                self.task_queue.watch_expiry(ti.lease.expires_at, ti.key)

    def __reduce__(self) -> tuple[Callable[..., SchedulerState], tuple[dict[str, Any]]]:
        """Pickling (pysyncobj's snapshots) goes through the versioned snapshot dict."""
        return (SchedulerState.restore, (self.snapshot(),))
