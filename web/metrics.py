"""``/metrics`` in the Prometheus text format, and the figures behind it.

- ``raftsched_web_requests_total{endpoint,method,status}`` and
  ``raftsched_web_request_seconds{endpoint}`` for every request. No label holds what a client
  chose: endpoint is the Flask endpoint's name (``unmatched`` for a URL no route has), method
  one of :data:`METHODS` or ``other`` (HTTP lets a client make up any method, and each new
  label value would be a series kept until the process ends), status the code we answered;
- ``raftsched_web_upstream_errors_total{method,code}``: gRPC calls to the cluster that failed,
  by RPC and status code (UNAVAILABLE, NOT_FOUND, ...).

Under gunicorn every worker process counts for itself. ``raftsched webserver`` sets
``PROMETHEUS_MULTIPROC_DIR`` (a fresh directory unless you set one) before the workers start,
so prometheus-client's multiprocess mode sums every worker's figures in each scrape; the
gunicorn config marks dead workers. Without that variable (``flask run``, tests) the figures
are this process's own.
"""

from __future__ import annotations

import os
import time

from flask import Blueprint, Flask, Response, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

bp = Blueprint("metrics", __name__)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

REQUESTS = Counter(
    "raftsched_web_requests",
    "HTTP requests served, by Flask endpoint, method and status code.",
    ["endpoint", "method", "status"],
)
LATENCY = Histogram(
    "raftsched_web_request_seconds",
    "Time to serve an HTTP request, by Flask endpoint.",
    ["endpoint"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
UPSTREAM_ERRORS = Counter(
    "raftsched_web_upstream_errors",
    "Failed gRPC calls to the scheduler cluster, by RPC and status code.",
    ["method", "code"],
)


def upstream_error(method: str, code: str) -> None:
    UPSTREAM_ERRORS.labels(method=method, code=code).inc()


@bp.get("/metrics")
def scrape() -> Response:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)

    @app.before_request
    def _start_timer() -> None:
        g.metrics_started = time.perf_counter()

    @app.after_request
    def _record(response: Response) -> Response:
        started = g.pop("metrics_started", None)
        endpoint = request.url_rule.endpoint if request.url_rule is not None else "unmatched"
        if endpoint == "static":
            return response
        method = request.method if request.method in METHODS else "other"
        REQUESTS.labels(endpoint, method, str(response.status_code)).inc()
        if started is not None:
            LATENCY.labels(endpoint).observe(time.perf_counter() - started)
        return response
