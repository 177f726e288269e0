"""The node's local admin endpoint: ``GET /status`` answers the node's status as JSON, and
``GET /metrics`` its Prometheus gauges (``cluster.metrics``) when given a metrics function.

A tiny stdlib HTTP server (``ThreadingHTTPServer``) on ``[cluster] admin_bind``, or, when that
is empty, on the node's Raft host with port = Raft port + 100 (127.0.0.1:7101 ->
127.0.0.1:7201; see ``raftsched.addresses``). Read-only, no secrets in it, meant for
loopback (``raftsched cluster status``, the test harness, local probes): keep the Raft and
admin ports off public networks.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from raftsched.raft.settings import split_address

log = logging.getLogger(__name__)


class AdminServer:
    def __init__(
        self,
        address: str,
        status: Callable[[], dict[str, Any]],
        metrics: Callable[[], tuple[bytes, str]] | None = None,
    ) -> None:
        host, port = split_address(address, key="admin_bind")
        handler = type(
            "_Handler",
            (_Handler,),
            {"status_fn": staticmethod(status), "metrics_fn": staticmethod(metrics)},
        )
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.address = f"{host}:{self._server.server_address[1]}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="admin-http",
            daemon=True,
        )
        self._thread.start()
        log.info("admin endpoint on http://%s/status", self.address)

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5.0)
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    status_fn: Callable[[], dict[str, Any]]
    metrics_fn: Callable[[], tuple[bytes, str]] | None = None
    server_version = "raftsched-admin"

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/metrics" and type(self).metrics_fn is not None:
            self._send_metrics()
            return
        if self.path.split("?", 1)[0] not in ("/status", "/status/"):
            self._send(404, {"error": f"not found: {self.path}; try GET /status"})
            return
        try:
            body = type(self).status_fn()
        except Exception as err:
            log.exception("status failed")
            self._send(500, {"error": str(err)})
            return
        self._send(200, body)

    def _send_metrics(self) -> None:
        metrics_fn = type(self).metrics_fn
        assert metrics_fn is not None
        try:
            data, content_type = metrics_fn()
        except Exception as err:
            log.exception("metrics failed")
            self._send(500, {"error": str(err)})
            return
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, default=str).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("admin %s - %s", self.address_string(), format % args)
