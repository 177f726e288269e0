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
  ``raftsched_db_ok``, ``raftsched_outbox_quarantined_total`` (entries the DB refused, now in
  quarantine: ``raftsched db quarantine list``; it falls when they are retried)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

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
    "raftsched_outbox_quarantined_total": (
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


class NodeMetrics:
    """The ``/metrics`` answer of one node, from its status function."""

    def __init__(self, status: StatusFn) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_StatusCollector(status))

    def render(self) -> tuple[bytes, str]:
        """(body, content type) in the Prometheus text format."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
