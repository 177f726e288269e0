"""gunicorn settings of ``raftsched webserver``: ``-c python:raftsched.web.gunicorn_conf``.

Everything comes from the raftsched config (``$RAFTSCHED_CONFIG`` / ``RAFTSCHED__WEBSERVER__*``):
``[webserver] bind``, ``workers``, ``worker_class`` (default gthread) and ``threads``. The app
is ``raftsched.web:create_app()``, built in each worker after the fork (gRPC channels must not
cross a fork). With ``PROMETHEUS_MULTIPROC_DIR`` set, the directory's stale files are removed
at start and each dead worker is marked, so /metrics sums the live workers' figures.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from raftsched.config import load_config

_config = load_config()
_web = _config.webserver

# Earlier designs named the threaded worker gunicorn.workers.gthread.GThread, a class gunicorn
# does not have (it is ThreadWorker); configs written that way keep working.
_WORKER_ALIASES = {"gunicorn.workers.gthread.GThread": "gunicorn.workers.gthread.ThreadWorker"}

wsgi_app = "raftsched.web:create_app()"
bind = [_web.bind]
workers = _web.workers
worker_class = _WORKER_ALIASES.get(_web.worker_class, _web.worker_class)
threads = _web.threads
proc_name = "raftsched-webserver"
accesslog = "-"
errorlog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'  # no cookies, no referrer
loglevel = _config.core.logging_level.lower()
if _config.core.log_format == "json":  # [core] log_format: gunicorn's and the app's lines too
    from raftsched.logging_setup import gunicorn_logconfig, set_node_id

    set_node_id(f"webserver {_web.bind}")
    logconfig_dict = gunicorn_logconfig(_config.core.logging_level, "json")
# A followed log or a slow cluster must not get a worker killed: pages wait at most
# RAFTSCHED_DEADLINE seconds per call.
timeout = 60
graceful_timeout = 10
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")

_METRICS_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def on_starting(server: Any) -> None:
    if _METRICS_DIR:
        directory = Path(_METRICS_DIR)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink()


def child_exit(server: Any, worker: Any) -> None:
    if _METRICS_DIR:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    if _METRICS_DIR and os.environ.get("RAFTSCHED_WEB_METRICS_DIR_OWNED") == "1":
        shutil.rmtree(_METRICS_DIR, ignore_errors=True)


# -- one write per response head and first body part ------------------------------------------
#
# gunicorn writes a response's head and its body with two send calls. A webserver killed
# between them (kill -9, OOM) leaves nginx with a head it has already passed on to the client,
# so it cannot retry the request on the other webserver and the client gets a cut-off page.
# Between the two calls the thread gives up the GIL, so on a busy machine that gap lasts
# milliseconds, and `scripts/bench/web.py --kill-one` saw a cut-off page in most runs. Sent
# together, a page that fits the socket buffer reaches nginx whole or not at all, and "not at
# all" is an error nginx retries (proxy_next_upstream error). Streamed answers (a followed
# task log) still send the head with their first part.


class _Collect:
    """Stands in for the socket while gunicorn writes the head: keeps the bytes."""

    def __init__(self) -> None:
        self.data = b""

    def sendall(self, data: bytes) -> None:
        self.data += data


class _Prefixed:
    """The real socket, with the held-back head put in front of the first write."""

    def __init__(self, sock: Any, head: bytes) -> None:
        self._sock, self.head = sock, head

    def sendall(self, data: bytes) -> None:
        data, self.head = self.head + data, b""
        self._sock.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _patch_single_write() -> None:
    from gunicorn.http import wsgi

    original = wsgi.Response.write
    if getattr(original, "_raftsched_single_write", False):
        return

    def write(self: Any, arg: bytes) -> None:
        if self.headers_sent:
            return original(self, arg)
        real, held = self.sock, _Collect()
        try:
            self.sock = held
            self.send_headers()
            self.sock = prefixed = _Prefixed(real, held.data)
            original(self, arg)
            if prefixed.head:  # the body part was empty (or dropped): the head alone
                real.sendall(prefixed.head)
        finally:
            self.sock = real

    write._raftsched_single_write = True  # type: ignore[attr-defined]
    wsgi.Response.write = write  # type: ignore[method-assign]


_patch_single_write()
