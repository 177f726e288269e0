"""A node's recent history, kept in memory for the cluster page: leader changes, elections and
membership changes (events), and commit latency and apply lag over time (samples).

:class:`NodeHistory` is fed by the API's health loop (``node_api.py``), at most every
:data:`SAMPLE_SECONDS`: it reads the node's own status (``NodeRuntime.status()``), its Raft
membership and its ``raftsched_commit_latency_seconds`` histogram. Both rings are bounded
(:data:`MAX_EVENTS`, :data:`MAX_SAMPLES`: two hours of samples), lost on restart, and sent
only when a GetStatus asks for them (``with_history``). Commit latency is the mean of the
commits this node proposed during the interval (the leader's; None when it proposed none);
apply lag is commit index minus applied index when sampled.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from raftsched.api.gen import cluster_pb2

SAMPLE_SECONDS = 5.0
MAX_SAMPLES = 1440  # 2 hours at 5 s
MAX_EVENTS = 200


def histogram_totals(histogram: Any) -> tuple[float, float] | None:
    """(sum, count) of an unlabelled prometheus_client Histogram; None without one."""
    if histogram is None:
        return None
    total = count = 0.0
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
    return total, count


class NodeHistory:
    def __init__(
        self,
        status: Callable[[], dict[str, Any]],
        members: Callable[[], Iterable[str]],
        commit_latency: Any = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._status, self._members, self._histogram = status, members, commit_latency
        self._clock = clock
        self._lock = threading.Lock()
        self.events: deque[tuple[float, str, int, str]] = deque(maxlen=MAX_EVENTS)
        self.samples: deque[tuple[float, int, int, float | None]] = deque(maxlen=MAX_SAMPLES)
        self._last: tuple[str, int, str] | None = None  # role, term, leader
        self._members_seen: set[str] | None = None
        self._totals: tuple[float, float] | None = None
        self._next_sample = 0.0

    def tick(self) -> None:
        """Record what changed since the last tick; a sample every SAMPLE_SECONDS."""
        now = self._clock()
        status = self._status()
        role, term = str(status.get("role") or ""), int(status.get("term") or 0)
        leader = str(status.get("leader") or "")
        members = set(self._members())
        with self._lock:
            if self._last is not None:
                old_role, old_term, old_leader = self._last
                if term > old_term:
                    self.events.append((now, "election", term, f"term {old_term} -> {term}"))
                if leader != old_leader:
                    self.events.append((now, "leader_change", term, leader or "none"))
                if role != old_role:
                    self.events.append((now, "role", term, f"{old_role} -> {role}"))
            else:
                self.events.append((now, "start", term, f"{role}, leader {leader or 'none'}"))
            self._last = (role, term, leader)
            if self._members_seen is not None:
                for address in sorted(members - self._members_seen):
                    self.events.append((now, "member_added", term, address))
                for address in sorted(self._members_seen - members):
                    self.events.append((now, "member_removed", term, address))
            self._members_seen = members
            if now < self._next_sample:
                return
            self._next_sample = now + SAMPLE_SECONDS
            totals = histogram_totals(self._histogram)
            latency = None
            if totals is not None and self._totals is not None and totals[1] > self._totals[1]:
                latency = (totals[0] - self._totals[0]) / (totals[1] - self._totals[1])
            self._totals = totals
            commit = int(status.get("commit_index") or 0)
            applied = int(status.get("applied_index") or 0)
            self.samples.append((now, commit, max(0, commit - applied), latency))

    def to_proto(self) -> cluster_pb2.NodeHistory:
        with self._lock:
            events, samples = list(self.events), list(self.samples)
        out = cluster_pb2.NodeHistory()
        for at, kind, term, detail in events:
            event = out.events.add(kind=kind, term=term, detail=detail)
            event.at.FromDatetime(datetime.fromtimestamp(at, UTC))
        for at, commit, lag, latency in samples:
            sample = out.samples.add(commit_index=commit, apply_lag=lag)
            sample.at.FromDatetime(datetime.fromtimestamp(at, UTC))
            if latency is not None:
                sample.commit_latency_seconds = latency
        return out
