"""A worker's Prometheus figures (raftsched/worker/metrics.py) against the in-memory
FakeTransport of test_worker_loop (real bash attempts); the live scrape of a real worker
process is tests/integration/test_worker_metrics.py."""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_worker_loop import FAST, FakeTransport, task, wait_idle

from raftsched.worker.loop import Worker
from raftsched.worker.metrics import OUTCOMES, WORKER_METRIC_NAMES, WorkerMetrics
from tests.deploy.test_metric_names import problems

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def transport() -> FakeTransport:
    return FakeTransport()


@pytest.fixture
def start_worker(transport: FakeTransport) -> Iterator[Callable[[], Worker]]:
    started: list[tuple[Worker, threading.Thread]] = []

    def start() -> Worker:
        worker = Worker(transport, FAST, worker_id="w1")
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "the worker did not stop"


def samples(metrics: WorkerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def value(metrics: WorkerMetrics, name: str, **labels: str) -> float:
    return samples(metrics)[(name, tuple(sorted(labels.items())))]


def test_slots_attempts_and_renewals_follow_the_worker(
    tmp_path: Path, transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker()
    m = worker.metrics
    assert value(m, "raftsched_worker_slots") == 2
    assert value(m, "raftsched_worker_slots_used") == 0
    gate = tmp_path / "gate"
    held = task("held", f"until [ -e {gate} ]; do sleep 0.05; done")
    transport.offer(held)
    assert transport.wait_for(lambda: value(m, "raftsched_worker_attempts_running") == 1)
    assert value(m, "raftsched_worker_slots_used") == 1
    assert transport.wait_for(lambda: value(m, "raftsched_worker_lease_renewals_total") >= 2)
    gate.touch()
    bad = task("bad", "exit 3", token=2)
    transport.offer(bad)
    assert transport.wait_for(lambda: len(transport.completed) == 2)
    assert wait_idle(worker)
    assert value(m, "raftsched_worker_attempts_started_total") == 2
    assert value(m, "raftsched_worker_attempts_finished_total", outcome="success") == 1
    assert value(m, "raftsched_worker_attempts_finished_total", outcome="failed") == 1
    assert value(m, "raftsched_worker_slots_used") == 0
    assert value(m, "raftsched_worker_attempts_running") == 0


def test_a_refused_lease_counts_as_a_renewal_failure_and_a_lost_attempt(
    tmp_path: Path, transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker()
    m = worker.metrics
    a = task("long", "sleep 1000")
    transport.offer(a)
    assert transport.wait_for(lambda: value(m, "raftsched_worker_attempts_running") == 1)
    with transport.cond:
        transport.refused.add(a.key)
    assert transport.wait_for(
        lambda: value(m, "raftsched_worker_attempts_finished_total", outcome="lost") == 1
    )
    assert value(m, "raftsched_worker_lease_renewal_failures_total", reason="refused") >= 1
    assert value(m, "raftsched_worker_lease_renewal_failures_total", reason="unanswered") == 0


def test_every_series_is_listed_bounded_and_named_by_the_rules(
    transport: FakeTransport, start_worker: Callable[..., Worker]
) -> None:
    from prometheus_client import generate_latest

    worker = start_worker()
    text = generate_latest(worker.metrics.registry).decode()
    assert not problems(text), problems(text)
    names = {name for name, _ in samples(worker.metrics)}
    assert names == set(WORKER_METRIC_NAMES)
    assert len(samples(worker.metrics)) <= 20  # the cardinality the module documents
    outcomes = {
        dict(labels)["outcome"]
        for name, labels in samples(worker.metrics)
        if name == "raftsched_worker_attempts_finished_total"
    }
    assert outcomes == set(OUTCOMES)


def test_served_on_loopback_off_at_port_zero_and_a_busy_port_is_not_fatal() -> None:
    metrics = WorkerMetrics()
    assert metrics.serve("127.0.0.1", 0) is None
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bound = metrics.serve("127.0.0.1", port)
    try:
        assert bound == ("127.0.0.1", port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            body = answer.read().decode()
        assert "raftsched_worker_attempts_started_total 0.0" in body
        assert WorkerMetrics().serve("127.0.0.1", port) is None  # taken: logged, not raised
    finally:
        metrics.close()
