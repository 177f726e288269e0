"""The counters and histograms of one scheduler node (:class:`NodeInstruments`), and
:func:`of`, which finds a node's instruments. ``/metrics`` renders them with the gauges of
``cluster/metrics.py``.

Counters and histograms (:class:`NodeInstruments`, fed by the node's threads; a fresh node
starts them at 0, Prometheus' ``rate()`` handles the reset):

- ``raftsched_leader_changes_total``: times this node saw a new leader (a later term with a
  leader: it won an election, or a leader of a new term reached it)
- ``raftsched_commit_latency_seconds``: propose -> committed result, per command proposed on
  this node (``cluster/proposer.py``; retries included)
- ``raftsched_apply_latency_seconds``: time inside ``SchedulerState.apply`` per log entry
  (``cluster/node.py``; core itself keeps no clock)
- ``raftsched_snapshot_duration_seconds``: writing one snapshot (serialise, gzip, fsync), in
  a forked child while the node goes on applying
- ``raftsched_snapshot_pause_seconds``: what a snapshot stops this node for (the fork)
- ``raftsched_snapshot_failures_total``: snapshots not written (the writer failed, was killed
  as stuck, or was refused); the log is kept and compaction retried. Alert on any increase:
  a log that is never compacted grows, and so does a restart's replay
- ``raftsched_leases_granted_total``, ``raftsched_leases_expired_total``: from the applied
  LeaseTasks and ExpireLeases results (every replica counts the same committed entries)
- ``raftsched_trigger_firings_total``, ``raftsched_trigger_errors_total``: triggers whose
  firing, or error (the trigger raised: its task fails), an applied FireTriggers took
- ``raftsched_schedule_lag_seconds``: for a scheduled run, its first lease's commit time (the
  LeaseTasks command's ``now``) minus the run's logical_date (its scheduled time)
- ``raftsched_db_write_latency_seconds``: one materializer batch write to the metadata DB
- ``raftsched_dag_parse_duration_seconds``: one parse of the DAG folder (leader)
- ``raftsched_dag_parse_errors_total``: DAG file versions that failed to import, each counted
  once (a file broken for an hour counts once; edited and still broken, once more), plus
  parses that failed as a whole
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_APPLY_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1
)  # fmt: skip
_SNAPSHOT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_LAG_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_PARSE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_LAGGED_RUNS_KEPT = 10_000  # scheduled runs whose first lease was already measured


class NodeInstruments:
    """The counters and histograms of one node, in its own registry. The node's threads feed
    them (``observe``/``inc`` are cheap and thread-safe); ``/metrics`` renders them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=False)
        r = self.registry
        self.leader_changes = Counter(
            "raftsched_leader_changes",
            "Times this node saw a new leader (a later Raft term with a leader).",
            registry=r,
        )
        self.commit_latency = Histogram(
            "raftsched_commit_latency_seconds",
            "Propose to committed result of commands proposed on this node (retries included).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.apply_latency = Histogram(
            "raftsched_apply_latency_seconds",
            "Time inside SchedulerState.apply per applied log entry.",
            buckets=_APPLY_BUCKETS,
            registry=r,
        )
        self.snapshot_duration = Histogram(
            "raftsched_snapshot_duration_seconds",
            "Time to write one Raft snapshot of the state (serialise, gzip, fsync; in a forked"
            " child while the node goes on applying).",
            buckets=_SNAPSHOT_BUCKETS,
            registry=r,
        )
        self.snapshot_pause = Histogram(
            "raftsched_snapshot_pause_seconds",
            "Time a snapshot stops the Raft tick thread (the fork of the writer).",
            buckets=_APPLY_BUCKETS,
            registry=r,
        )
        self.snapshot_failures = Counter(
            "raftsched_snapshot_failures",
            "Snapshots not written (writer failed, killed as stuck, or refused); the log is"
            " kept and compaction retried.",
            registry=r,
        )
        self.leases_granted = Counter(
            "raftsched_leases_granted",
            "Task leases granted by applied LeaseTasks entries.",
            registry=r,
        )
        self.leases_expired = Counter(
            "raftsched_leases_expired",
            "Task leases expired by applied ExpireLeases entries.",
            registry=r,
        )
        self.trigger_firings = Counter(
            "raftsched_trigger_firings",
            "Trigger firings taken by applied FireTriggers entries (the task resumes).",
            registry=r,
        )
        self.trigger_errors = Counter(
            "raftsched_trigger_errors",
            "Triggers that raised, taken by applied FireTriggers entries (the task fails).",
            registry=r,
        )
        self.slots_skipped = Counter(
            "raftsched_slots_skipped",
            "Schedule slots that got no run, by DAG and reason (overlap, buffer_full, catchup,"
            " catchup_window, not_parsed, paused, leader_unavailable), from applied skip"
            " decisions; a long gap whose slots were never"
            " enumerated counts once.",
            ["dag", "reason"],
            registry=r,
        )
        self.schedule_lag = Histogram(
            "raftsched_schedule_lag_seconds",
            "Scheduled runs: commit time of the first lease minus the run's logical_date.",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.db_write_latency = Histogram(
            "raftsched_db_write_latency_seconds",
            "One materializer batch write to the metadata database.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.dag_parse_duration = Histogram(
            "raftsched_dag_parse_duration_seconds",
            "One parse of the DAG folder (each file in a child process).",
            buckets=_PARSE_BUCKETS,
            registry=r,
        )
        self.dag_parse_errors = Counter(
            "raftsched_dag_parse_errors",
            "DAG file versions (path, mtime, size) that failed to import, each counted once,"
            " and parses that failed as a whole.",
            registry=r,
        )
        self._leader_term = -1
        self._lock = threading.Lock()
        self._lagged: OrderedDict[tuple[str, str], None] = OrderedDict()

    def note_leader(self, term: int) -> None:
        """A leader of ``term`` is known here (it is us, or it reached us)."""
        with self._lock:
            if term <= self._leader_term:
                return
            self._leader_term = term
        self.leader_changes.inc()

    def on_apply(self, log_index: int, command: Any, result: Any) -> None:
        """Apply listener (tick thread, under the state lock): lease counters and the
        schedule lag, read from the committed command and its result."""
        if result is None or getattr(result, "duplicate", False):
            return  # a retried request: its first result was counted
        name = type(command).__name__
        if name == "Batch":
            subs = getattr(command, "commands", ())
            for sub, sub_result in zip(subs, result.value or (), strict=False):
                self.on_apply(log_index, sub, sub_result)
        elif name == "LeaseTasks" and getattr(result, "ok", False):
            grants = result.value or ()
            if grants:
                self.leases_granted.inc(len(grants))
            now = getattr(command, "now", None)
            for grant in grants:
                self._schedule_lag(grant, now)
        elif name == "FireTriggers":
            firings = getattr(command, "firings", ())
            for firing, item in zip(firings, result.value or (), strict=False):
                if getattr(item, "ok", False):
                    counter = self.trigger_errors if firing.error else self.trigger_firings
                    counter.inc()
        elif name == "CreateRuns":
            self._skipped(command, result)
        elif name == "ExpireLeases":
            expired = sum(1 for item in result.value or () if getattr(item, "ok", False))
            if expired:
                self.leases_expired.inc(expired)

    def _skipped(self, command: Any, result: Any) -> None:
        items = result.value if isinstance(result.value, (list, tuple)) else ()
        for decision, item in zip(getattr(command, "runs", ()), items, strict=False):
            reason = getattr(decision, "skip_reason", "")
            if reason and getattr(item, "ok", False):
                slots = max(1, int(getattr(decision, "skipped_slots", 0) or 0))
                self.slots_skipped.labels(dag=decision.dag_id, reason=reason).inc(slots)

    def _schedule_lag(self, grant: Any, now: datetime | None) -> None:
        lease = getattr(grant, "lease", None)
        key = getattr(lease, "key", None)
        if now is None or key is None or not str(key.run_id).startswith("scheduled__"):
            return
        run = (key.dag_id, key.run_id)
        with self._lock:
            if run in self._lagged:
                return
            self._lagged[run] = None
            if len(self._lagged) > _LAGGED_RUNS_KEPT:
                self._lagged.popitem(last=False)
        self.schedule_lag.observe(max(0.0, (now - grant.logical_date).total_seconds()))


# Instruments for parts run without a node runtime (unit tests' fake nodes): fed, never shown.
_DETACHED = NodeInstruments()


def of(node: Any) -> NodeInstruments:
    """The instruments of ``node`` (a SchedulerNode), or detached ones for anything else."""
    found = getattr(node, "instruments", None)
    return found if isinstance(found, NodeInstruments) else _DETACHED
