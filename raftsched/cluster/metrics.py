"""Prometheus figures of one scheduler node: ``GET /metrics`` on its admin endpoint.

Every scrape reads the node's status once (``NodeRuntime.status()``, the JSON of
``GET /status``) and answers gauges in the Prometheus text format. Each node has its own
:class:`~prometheus_client.CollectorRegistry` (never the process-wide default), so several
nodes in one process (tests) do not mix their figures.

Gauges (no labels; Prometheus adds ``instance``):

- ``raftsched_is_leader``, ``raftsched_has_quorum``, ``raftsched_raft_term``,
  ``raftsched_commit_index``, ``raftsched_applied_index``
- ``raftsched_outbox_backlog`` (entries not yet acknowledged as written to the DB),
  ``raftsched_outbox_backpressure``
- ``raftsched_apply_halted``: 1 when the state machine stopped applying (a bug; the node's
  ``apply_error`` says why), else 0
- leader only, once its materializer has read them: ``raftsched_db_watermark``,
  ``raftsched_db_ok``, ``raftsched_outbox_quarantined`` (entries the DB refused, now in
  quarantine: ``raftsched db quarantine list``; it falls when they are retried)
- ``raftsched_raft_role{role}``: 1 for this node's current role (leader, follower, candidate)
- ``raftsched_raft_log_entries``: entries in this node's Raft log (pysyncobj ``log_len``;
  falls when a snapshot compacts the log)
- ``raftsched_runs{state}``, ``raftsched_task_instances{state}``: the runs and task instances
  held in this node's replicated state (live ones, and finished ones until evicted), counted
  at scrape time under the node's read lock (O(live state))

Per DAG and per task (bounded label sets): :mod:`raftsched.cluster.dag_metrics`.
Counters and histograms: :class:`~raftsched.cluster.instruments.NodeInstruments`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# re-exported: the node, the proposer and the parse thread import them from here
from raftsched.cluster.dag_metrics import DAG_METRIC_NAMES, DagCollector
from raftsched.cluster.instruments import NodeInstruments, of
from raftsched.core.pool_table import DEFAULT_POOL

__all__ = ["METRIC_NAMES", "NodeInstruments", "NodeMetrics", "of"]

log = logging.getLogger(__name__)

StatusFn = Callable[[], dict[str, Any]]

# name -> (help, how to read it from the status dict); None: no sample this scrape.
_GAUGES: dict[str, tuple[str, Callable[[dict[str, Any]], float | None]]] = {
    "raftsched_is_leader": (
        "1 when this node is the Raft leader, else 0.",
        lambda s: float(s.get("role") == "leader"),
    ),
    "raftsched_has_quorum": (
        "1 when this node sees a quorum (a connected majority, itself included).",
        lambda s: float(bool(s.get("has_quorum"))),
    ),
    "raftsched_raft_term": ("This node's current Raft term.", lambda s: _num(s, "term")),
    "raftsched_commit_index": (
        "Highest Raft log index this node knows to be committed.",
        lambda s: _num(s, "commit_index"),
    ),
    "raftsched_applied_index": (
        "Highest Raft log index this node has applied to its state.",
        lambda s: _num(s, "applied_index"),
    ),
    "raftsched_outbox_backlog": (
        "Outbox entries not yet acknowledged as written to the metadata database.",
        lambda s: _num(s, "outbox_size"),
    ),
    "raftsched_outbox_backpressure": (
        "1 while the leader holds back new work because the outbox is too long.",
        lambda s: float(bool(s.get("backpressure"))),
    ),
    "raftsched_apply_halted": (
        "1 when this node's state machine stopped applying log entries (see its apply_error"
        " in `raftsched cluster status`), else 0.",
        lambda s: float(bool(s.get("apply_error"))),
    ),
    "raftsched_db_watermark": (
        "Last outbox seq written to the metadata database (leader only).",
        lambda s: _leader_num(s, "db_watermark"),
    ),
    "raftsched_db_ok": (
        "1 when the leader's materializer reaches the metadata database (leader only).",
        lambda s: _leader_num(s, "db_ok"),
    ),
    "raftsched_outbox_quarantined": (
        "Outbox entries the metadata database refused, now in quarantine (leader only);"
        " `raftsched db quarantine list` shows them.",
        lambda s: _leader_num(s, "quarantined"),
    ),
}


def _num(status: dict[str, Any], key: str) -> float | None:
    value = status.get(key)
    return None if value is None else float(value)


def _leader_num(status: dict[str, Any], key: str) -> float | None:
    """Figures only the leader's materializer knows; followers' copies may be stale."""
    return _num(status, key) if status.get("role") == "leader" else None


ROLES = ("leader", "follower", "candidate")
RUN_STATES = ("queued", "running", "success", "failed")
TASK_STATES = (
    "none",
    "queued",
    "running",
    "success",
    "failed",
    "up_for_retry",
    "upstream_failed",
    "skipped",
    "deferred",
)


# Every series name /metrics can answer (counters and histograms with their suffixes), for
# the dashboard test and the README.
METRIC_NAMES: tuple[str, ...] = (
    *_GAUGES,
    "raftsched_raft_role",
    "raftsched_raft_log_entries",
    "raftsched_runs",
    "raftsched_task_instances",
    "raftsched_leader_changes_total",
    "raftsched_leases_granted_total",
    "raftsched_leases_expired_total",
    "raftsched_trigger_firings_total",
    "raftsched_trigger_errors_total",
    "raftsched_triggers_running",
    "raftsched_pool_slots",
    "raftsched_pool_queued_tasks",
    "raftsched_asset_events_total",
    "raftsched_dag_parse_errors_total",
    "raftsched_snapshot_failures_total",
    *DAG_METRIC_NAMES,
    *(
        f"{base}{suffix}"
        for base in (
            "raftsched_commit_latency_seconds",
            "raftsched_apply_latency_seconds",
            "raftsched_snapshot_duration_seconds",
            "raftsched_snapshot_pause_seconds",
            "raftsched_schedule_lag_seconds",
            "raftsched_db_write_latency_seconds",
            "raftsched_dag_parse_duration_seconds",
        )
        for suffix in ("_bucket", "_count", "_sum")
    ),
)


class _StatusCollector(Collector):
    def __init__(self, status: StatusFn) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        status = self._status()
        for name, (text, read) in _GAUGES.items():
            value = read(status)
            if value is not None:
                gauge = GaugeMetricFamily(name, text)
                gauge.add_metric([], value)
                yield gauge


class _RoleCollector(Collector):
    def __init__(self, status: StatusFn) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        current = self._status().get("role")
        role = GaugeMetricFamily(
            "raftsched_raft_role", "1 for this node's current Raft role, else 0.", labels=["role"]
        )
        for name in ROLES:
            role.add_metric([name], float(current == name))
        yield role


class _NodeCollector(Collector):
    """Figures read from the node itself at scrape time: the log length and the live state."""

    def __init__(self, node: Callable[[], Any]) -> None:
        self._node = node

    def collect(self) -> Iterator[Metric]:
        node = self._node()
        if node is None:
            return
        journal = getattr(getattr(node, "raft", None), "journal", None)  # (tests' fakes: none)
        try:
            log_len = None if journal is None else len(journal)
        except Exception:  # the tick thread may be compacting it
            log_len = None
        if log_len is not None:
            gauge = GaugeMetricFamily(
                "raftsched_raft_log_entries",
                "Entries in this node's Raft log (falls when a snapshot compacts it).",
            )
            gauge.add_metric([], float(log_len))
            yield gauge
        runs, tis = node.read(_count_states)
        run_family = GaugeMetricFamily(
            "raftsched_runs", "Runs in this node's replicated state, by state.", labels=["state"]
        )
        for state in RUN_STATES:
            run_family.add_metric([state], float(runs.get(state, 0)))
        yield run_family
        ti_family = GaugeMetricFamily(
            "raftsched_task_instances",
            "Task instances in this node's replicated state, by state.",
            labels=["state"],
        )
        for state in TASK_STATES:
            ti_family.add_metric([state], float(tis.get(state, 0)))
        yield ti_family
        running = GaugeMetricFamily(
            "raftsched_triggers_running",
            "Triggers of deferred tasks held by a triggerer's live lease (this replica).",
        )
        running.add_metric([], float(node.read(_triggers_running)))
        yield running
        events = CounterMetricFamily(  # the state's event ids: 1, 2, ... across the cluster
            "raftsched_asset_events",
            "Asset events committed since the cluster began (task outlets and from outside).",
        )
        events.add_metric([], float(node.read(lambda st: st.assets.next_id() - 1)))
        yield events
        yield from _pool_families(node.read(_pools))


def _pools(state: Any) -> list[tuple[str, int | None, int, int]]:
    """(pool, slots or None: unlimited, slots in use, tasks queued): every pool set, any a
    queued task names, and default_pool always (core/pool_table.py)."""
    queued = state.task_queue.queued_by_pool(DEFAULT_POOL)
    names = {DEFAULT_POOL, *queued, *(pool.name for pool in state.pools.pools())}
    out = []
    for name in sorted(names):
        pool = state.pools.get(name)
        slots = pool.slots if pool is not None else (None if name == DEFAULT_POOL else 0)
        out.append((name, slots, state.pools.used(name), queued.get(name, 0)))
    return out


def _pool_families(pools: list[tuple[str, int | None, int, int]]) -> Iterator[Metric]:
    slots = GaugeMetricFamily(
        "raftsched_pool_slots",
        "A pool's slots (state total; absent: unlimited) and those its running attempts hold"
        " (state running).",
        labels=["pool", "state"],
    )
    queued = GaugeMetricFamily(
        "raftsched_pool_queued_tasks", "Tasks waiting (QUEUED) in a pool.", labels=["pool"]
    )
    for name, total, running, waiting in pools:
        if total is not None:
            slots.add_metric([name, "total"], float(total))
        slots.add_metric([name, "running"], float(running))
        queued.add_metric([name], float(waiting))
    yield slots
    yield queued


def _triggers_running(state: Any) -> int:
    return int(state.triggers.running_count(datetime.now(UTC)))  # an observation: any clock


def _count_states(state: Any) -> tuple[dict[str, int], dict[str, int]]:
    """Under the node's read lock: one pass over the runs held in memory."""
    runs: dict[str, int] = {}
    tis: dict[str, int] = {}
    for run in state.runs():
        key = str(run.state)
        runs[key] = runs.get(key, 0) + 1
        for ti in state.task_instances(run.dag_id, run.run_id):
            ti_key = str(ti.state)
            tis[ti_key] = tis.get(ti_key, 0) + 1
    return runs, tis


class NodeMetrics:
    """The ``/metrics`` answer of one node: its status gauges; with ``instruments`` also the
    role gauge and the counters and histograms, and with ``node`` (returns the SchedulerNode,
    or None before it exists) the figures read from the node at scrape time."""

    def __init__(
        self,
        status: StatusFn,
        instruments: NodeInstruments | None = None,
        node: Callable[[], Any] | None = None,
    ) -> None:
        if instruments is None:  # the status gauges alone
            self.registry = CollectorRegistry(auto_describe=False)
        else:
            self.registry = instruments.registry
            self.registry.register(_RoleCollector(status))
        self.registry.register(_StatusCollector(status))
        if node is not None:
            self.registry.register(_NodeCollector(node))
            self.registry.register(DagCollector(node))  # per DAG and task: dag_metrics.py

    def render(self) -> tuple[bytes, str]:
        """(body, content type) in the Prometheus text format."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
