"""Prometheus figures of one worker process: ``GET /metrics`` on ``[worker] metrics_host``:
``metrics_port`` (127.0.0.1:7401 by default; port 0: not served).

Each worker has its own :class:`~prometheus_client.CollectorRegistry` (never the process-wide
default), so several workers in one process (tests) do not mix their figures. No series has a
label whose values come from a DAG, a task or a host: every label below has a fixed set of
values, so one worker serves at most 20 series (Prometheus adds ``instance`` and ``job``).

Read at scrape time (gauges):

- ``raftsched_worker_slots``: attempts it runs at once (``[worker] concurrency``)
- ``raftsched_worker_slots_used``: leases it holds (running, or their outcome on the way)
- ``raftsched_worker_attempts_running``: attempts whose process has not ended yet
- ``raftsched_worker_supervisor_up``: 1 while its task supervisor (the process that forks
  every attempt, ``supervisor.py``) is alive; 0 before its first start and once it died
- ``raftsched_worker_forkservers``: DAG files with a warm Python fork server (at most 8)

Counted as it happens (counters; a restarted worker starts them at 0):

- ``raftsched_worker_attempts_started_total``
- ``raftsched_worker_attempts_finished_total{outcome}``: ``success``, ``failed``,
  ``deferred`` (handed to a triggerer), ``fenced`` (killed for want of an accepted heartbeat,
  reported as failed), ``lost`` (the lease went elsewhere: killed, not reported),
  ``handed_back`` (killed by a shutdown's grace period, its lease released)
- ``raftsched_worker_lease_renewals_total``: leases a heartbeat extended
- ``raftsched_worker_lease_renewal_failures_total{reason}``: per lease, ``refused`` (the
  cluster refused its token: the lease went elsewhere) or ``unanswered`` (the heartbeat call
  failed: no node answered in time)
- ``raftsched_worker_supervisor_restarts_total``: task supervisors started again after the
  previous one died (its attempts ended as failures)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

log = logging.getLogger(__name__)

OUTCOMES = ("success", "failed", "deferred", "fenced", "lost", "handed_back")
RENEWAL_FAILURES = ("refused", "unanswered")

# Every series a worker's /metrics can answer, for the dashboard test and the README.
WORKER_METRIC_NAMES: tuple[str, ...] = (
    "raftsched_worker_slots",
    "raftsched_worker_slots_used",
    "raftsched_worker_attempts_running",
    "raftsched_worker_supervisor_up",
    "raftsched_worker_forkservers",
    "raftsched_worker_attempts_started_total",
    "raftsched_worker_attempts_finished_total",
    "raftsched_worker_lease_renewals_total",
    "raftsched_worker_lease_renewal_failures_total",
    "raftsched_worker_supervisor_restarts_total",
)


class WorkerMetrics:
    """The counters of one worker (its threads feed them; ``inc`` is cheap and thread-safe)
    and, with :meth:`watch`, the gauges read from it at scrape time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.started = Counter(
            "raftsched_worker_attempts_started", "Attempts this worker started.", registry=r
        )
        self.finished = Counter(
            "raftsched_worker_attempts_finished",
            "Attempts this worker saw end, by outcome (success, failed, deferred, fenced,"
            " lost, handed_back).",
            ["outcome"],
            registry=r,
        )
        self.renewals = Counter(
            "raftsched_worker_lease_renewals",
            "Leases of running attempts a heartbeat extended.",
            registry=r,
        )
        self.renewal_failures = Counter(
            "raftsched_worker_lease_renewal_failures",
            "Leases a heartbeat did not extend: refused (the lease went elsewhere) or"
            " unanswered (no node answered the call).",
            ["reason"],
            registry=r,
        )
        for outcome in OUTCOMES:  # every series from the first scrape: rate() sees the first
            self.finished.labels(outcome)
        for reason in RENEWAL_FAILURES:
            self.renewal_failures.labels(reason)
        self._server: WSGIServer | None = None

    def watch(self, worker: Any) -> None:
        """Serve the gauges read from ``worker`` (a ``loop.Worker``) at each scrape."""
        self.registry.register(_WorkerCollector(worker))

    def outcome(self, r: Any, outcome: Any) -> None:
        """Count one attempt that ended (``loop.Worker._finish``'s ``_Running`` and
        ``runner.Outcome``), by what the worker does with it."""
        if r.lost:
            kind = "lost"
        elif r.fenced or r.attempt.fenced:
            kind = "fenced"
        elif outcome.killed:
            kind = "handed_back"
        elif outcome.defer is not None:
            kind = "deferred"
        else:
            kind = "success" if outcome.success else "failed"
        self.finished.labels(kind).inc()

    # -- the endpoint ----------------------------------------------------------------------
    def serve(self, host: str, port: int) -> tuple[str, int] | None:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread; the address bound, or
        None when the port is 0 (off) or cannot be bound (logged: the worker runs on without
        it, as a second worker on a host with the default port would)."""
        if port == 0:
            return None
        from prometheus_client import start_http_server

        try:
            self._server, _thread = start_http_server(port, host, registry=self.registry)
        except OSError as err:
            log.warning(
                "worker metrics not served: cannot listen on %s:%d (%s); set [worker]"
                " metrics_port to a free port, or 0 to turn them off",
                host,
                port,
                err,
            )
            return None
        bound = self._server.server_address
        log.info("worker metrics on http://%s:%d/metrics", bound[0], bound[1])
        return str(bound[0]), int(bound[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _WorkerCollector(Collector):
    def __init__(self, worker: Any) -> None:
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        w = self._worker
        with w._changed:
            held = list(w._running.values())
        slots = w.settings.concurrency
        yield _gauge("raftsched_worker_slots", "Attempts this worker runs at once.", slots)
        yield _gauge(
            "raftsched_worker_slots_used",
            "Leases this worker holds (attempts running, or their outcome on the way).",
            len(held),
        )
        yield _gauge(
            "raftsched_worker_attempts_running",
            "Attempts of this worker whose process has not ended yet.",
            sum(1 for r in held if not r.ended),
        )
        up, restarts, forkservers = _supervisor_health()
        yield _gauge(
            "raftsched_worker_supervisor_up",
            "1 while this worker's task supervisor (it forks every attempt) is alive.",
            up,
        )
        yield _gauge(
            "raftsched_worker_forkservers",
            "DAG files with a warm Python fork server in this worker.",
            forkservers,
        )
        restarted = CounterMetricFamily(
            "raftsched_worker_supervisor_restarts",
            "Task supervisors this worker started again after the previous one died.",
        )
        restarted.add_metric([], restarts)
        yield restarted


def _supervisor_health() -> tuple[float, float, float]:
    """(up, restarts, fork servers) of this process's executor, never starting it."""
    from raftsched.worker import executor as executor_module

    ex = executor_module.current()
    if ex is None:
        return 0.0, 0.0, 0.0
    proc, channel = ex.proc, ex.supervisor  # unlocked: a scrape never waits for a spawn
    up = proc is not None and proc.poll() is None and channel is not None and not channel.closed
    return float(up), float(max(0, ex.starts - 1)), float(len(ex.forkservers))


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text)
    family.add_metric([], float(value))
    return family
