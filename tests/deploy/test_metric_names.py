"""Every series a scheduler node's, a webserver's and a worker's ``/metrics`` serve follows
Prometheus's naming conventions: the rules of ``promtool check metrics`` (client_golang's
promlint), checked here in Python, and by promtool itself where Debian's ``prometheus`` package
put it on PATH.

The rules: a HELP text; snake_case names without ``:``; ``_total`` on counters and only on
counters; ``_bucket`` only on histograms, ``_count``/``_sum`` only on histograms and
summaries; base units spelled out (seconds, bytes), not abbreviated (``_ms``, ``_sec``) nor
scaled (``_milliseconds``); no metric type in the name.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from raftsched.cluster.metrics import NodeInstruments, NodeMetrics

# A leader's status with every figure set, so every gauge has its sample.
LEADER = {
    "role": "leader",
    "term": 2,
    "has_quorum": True,
    "commit_index": 9,
    "applied_index": 9,
    "outbox_size": 0,
    "db_watermark": 3,
    "db_ok": True,
    "quarantined": 1,
}
ABBREVIATED = {
    "s",
    "ms",
    "us",
    "ns",
    "sec",
    "secs",
    "b",
    "kb",
    "mb",
    "gb",
    "tb",
    "pb",
    "m",
    "h",
    "d",
}
SCALED = {
    "milliseconds",
    "microseconds",
    "nanoseconds",
    "minutes",
    "hours",
    "days",
    "kilobytes",
    "megabytes",
    "gigabytes",
}
TYPES = ("counter", "gauge", "histogram", "summary")


def node_metrics() -> str:
    return NodeMetrics(lambda: LEADER, NodeInstruments()).render()[0].decode()


def web_metrics() -> str:
    from raftsched.web import create_app

    app = create_app(
        {
            "TESTING": True,
            "SECRET_KEY": "a-test-secret",
            "RAFTSCHED_SERVERS": ["127.0.0.1:9"],
            "RAFTSCHED_TOKEN": "t",
        }
    )
    try:
        client = app.test_client()
        client.get("/login")  # one request, so the labelled series have samples too
        return client.get("/metrics").get_data(as_text=True)
    finally:
        app.extensions["raftsched_gateway"].close()


def worker_metrics() -> str:
    import threading
    from types import SimpleNamespace

    from prometheus_client import generate_latest

    from raftsched.worker.loop import WorkerSettings
    from raftsched.worker.metrics import WorkerMetrics

    metrics = WorkerMetrics()
    idle = SimpleNamespace(settings=WorkerSettings(), _changed=threading.Condition(), _running={})
    metrics.watch(idle)  # the gauges a worker answers, read from an idle one
    return generate_latest(metrics.registry).decode()


def families(text: str) -> dict[str, tuple[str, str]]:
    """name -> (type, help) from the # TYPE and # HELP lines."""
    helps = dict(re.findall(r"^# HELP (\S+) ?(.*)$", text, re.M))
    return {
        name: (kind, helps.get(name, ""))
        for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    }


def problems(text: str) -> list[str]:
    found = []
    for name, (kind, help_text) in families(text).items():
        words = name.split("_")
        checks = {
            "no help text": not help_text.strip(),
            "not snake_case (or holds ':')": not re.fullmatch(r"[a-z_][a-z0-9_]*", name),
            'a counter without the "_total" suffix': kind == "counter"
            and not name.endswith("_total"),
            'a non-counter with the "_total" suffix': kind != "counter" and name.endswith("_total"),
            'a non-histogram with the "_bucket" suffix': kind != "histogram"
            and name.endswith("_bucket"),
            'the "_count"/"_sum" suffix outside a histogram or summary': kind
            not in ("histogram", "summary")
            and name.endswith(("_count", "_sum")),
            "an abbreviated unit": bool(ABBREVIATED & set(words[1:])),
            "a scaled unit instead of the base unit": bool(SCALED & set(words)),
            "its type in the name": any(t in words for t in TYPES),
        }
        found += [f"{name} ({kind}): {what}" for what, bad in checks.items() if bad]
    return found


@pytest.mark.parametrize(
    "source", [node_metrics, web_metrics, worker_metrics], ids=["node", "webserver", "worker"]
)
def test_metric_names_follow_the_prometheus_conventions(source) -> None:  # type: ignore[no-untyped-def]
    text = source()
    assert families(text), "no metric families parsed"
    assert not problems(text), problems(text)


@pytest.mark.parametrize(
    "source", [node_metrics, web_metrics, worker_metrics], ids=["node", "webserver", "worker"]
)
def test_promtool_check_metrics_passes(source) -> None:  # type: ignore[no-untyped-def]
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI") == "true":  # scripts/test puts it in the venv
            pytest.fail("promtool is missing: scripts/test takes it from Debian's prometheus")
        pytest.skip("promtool is not installed (Debian: prometheus); the rules above still ran")
    done = subprocess.run(
        [promtool, "check", "metrics"], input=source(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_catch_what_was_wrong() -> None:
    """The gauge once named like a counter, and a counter without its suffix."""
    text = (
        "# HELP raftsched_outbox_quarantined_total Entries in quarantine.\n"
        "# TYPE raftsched_outbox_quarantined_total gauge\n"
        "raftsched_outbox_quarantined_total 1.0\n"
        "# HELP raftsched_things Things.\n"
        "# TYPE raftsched_things counter\n"
        "raftsched_things 1.0\n"
        "# HELP raftsched_wait_ms Waits.\n"
        "# TYPE raftsched_wait_ms histogram\n"
    )
    assert len(problems(text)) == 3, problems(text)
