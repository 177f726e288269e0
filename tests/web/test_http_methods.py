"""Made-up HTTP methods (any token is a method in HTTP, and no login is needed to send one):
the webserver's /metrics labels them ``other``, so 2,000 of them add no series, and nginx in
front (web/nginx/raftsched.conf.template) refuses them with 405 before a webserver sees one.

Real processes: ``raftsched webserver`` (gunicorn) against the web tests' gRPC server, and
nginx rendered from the template when it is installed (CI installs it).
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from web_support import TOKEN, free_port

from raftsched.standalone import webfarm

pytestmark = pytest.mark.slow

MADE_UP = 2_000
SERIES = "raftsched_web_requests_total{"


def _method(i: int) -> str:
    """XA, XB, ... XAB...: upper-case letters only (gunicorn refuses lower case)."""
    letters = ""
    while True:
        i, digit = divmod(i, 26)
        letters += chr(ord("A") + digit)
        if not i:
            return "X" + letters + "Q"


def _wait_until(port: int, path: str, process: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        assert process.poll() is None, log.read_text()[-5000:]
        assert time.monotonic() < deadline, f"{path} on port {port} did not answer in 60 s"
        time.sleep(0.2)


@pytest.fixture
def webserver(tmp_path: Path, _server) -> Iterator[int]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTSCHED")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(RAFTSCHED_HOME=str(tmp_path), RAFTSCHED__WEBSERVER__SECRET_KEY="s" * 32)
    argv = [sys.executable, "-m", "raftsched", "webserver", "--bind", f"127.0.0.1:{port}"]
    argv += ["--workers", "1", "--threads", "2", "--server", _server[1], "--token", TOKEN]
    log = tmp_path / "webserver.log"
    with log.open("w") as out:  # a file, not a pipe: 2,000 access-log lines would fill one
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_until(port, "/health", process, log)
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _metrics(port: int) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    assert response.status == 200
    return response.read().decode()


def _send(port: int, methods: list[str]) -> list[int]:
    """Each method once, each on its own connection: the statuses."""
    statuses = []
    for method in methods:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request(method, "/dags")
        response = conn.getresponse()
        response.read()
        statuses.append(response.status)
        conn.close()
    return statuses


def test_made_up_methods_add_no_metric_series(webserver: int) -> None:
    assert set(_send(webserver, [_method(i) for i in range(10)])) == {405}
    _metrics(webserver)  # the scrape's own series exists from here on
    before = _metrics(webserver)
    series = [line for line in before.splitlines() if line.startswith(SERIES)]
    assert any('method="other"' in line for line in series), series
    assert set(_send(webserver, [_method(i) for i in range(10, 10 + MADE_UP)])) == {405}
    after = _metrics(webserver)
    assert [line.rsplit(" ", 1)[0] for line in after.splitlines() if line.startswith(SERIES)] == [
        line.rsplit(" ", 1)[0] for line in series
    ]
    assert len(after) - len(before) < 100  # only the counters' figures grew
    assert "XAQ" not in after


def test_nginx_refuses_made_up_methods(webserver: int, tmp_path: Path) -> None:
    if not webfarm.nginx_available():
        if os.environ.get("CI") == "true":
            pytest.fail("nginx is not installed; scripts/test installs it")
        pytest.skip("nginx is not installed")
    lb = free_port()
    run_dir = tmp_path / "nginx"
    run_dir.mkdir()
    conf = run_dir / "nginx.conf"
    upstream = f"127.0.0.1:{webserver}"
    conf.write_text(
        webfarm.render_nginx_conf([upstream], listen=f"127.0.0.1:{lb}", run_dir=run_dir)
    )
    log = run_dir / "nginx.log"
    with log.open("w") as out:
        nginx = subprocess.Popen(webfarm.nginx_argv(conf, run_dir), stdout=out, stderr=out)
    try:
        _wait_until(lb, "/lb-health", nginx, run_dir / "error.log")
        before = _metrics(webserver)
        assert set(_send(lb, [_method(i) for i in range(200)])) == {405}
        after = _metrics(webserver)
        # none of the made-up ones reached the webserver: its "other" figure did not move
        other = [line for line in after.splitlines() if 'method="other"' in line]
        assert other == [line for line in before.splitlines() if 'method="other"' in line]
        for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
            conn = http.client.HTTPConnection("127.0.0.1", lb, timeout=10)
            conn.request(method, "/dags")
            response = conn.getresponse()
            response.read()
            conn.close()  # the webserver answered (whatever it answered), not nginx
            assert response.getheader("X-Upstream") == upstream, (method, response.status)
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait(timeout=30)
