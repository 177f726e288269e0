"""`raftsched webserver`: gunicorn with the app factory, configured by flags, env and config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from web_support import TOKEN, free_port

from raftsched.cli.main import build_parser
from raftsched.cli.webserver_cmd import gunicorn_env


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTSCHED")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env["RAFTSCHED_HOME"] = str(tmp_path)
    env.update(extra)
    return env


def test_flags_become_config_overrides(tmp_path):
    args = build_parser().parse_args(
        ["--config", "x.cfg", "webserver", "--bind", "0.0.0.0:9000", "--workers", "3"]
    )
    env = gunicorn_env(args, {"RAFTSCHED_SERVER": "10.0.0.1:7301", "RAFTSCHED_TOKEN": "t"})
    assert env["RAFTSCHED_CONFIG"] == os.path.abspath("x.cfg")
    assert env["RAFTSCHED__WEBSERVER__BIND"] == "0.0.0.0:9000"
    assert env["RAFTSCHED__WEBSERVER__WORKERS"] == "3"
    assert env["RAFTSCHED__WEBSERVER__GRPC_SERVERS"] == "10.0.0.1:7301"
    assert env["RAFTSCHED__WEBSERVER__TOKEN"] == "t"
    assert "RAFTSCHED__WEBSERVER__THREADS" not in env


def test_refuses_to_start_without_secret_key(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "raftsched", "webserver"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "secret_key" in result.stderr and "Traceback" not in result.stderr


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.slow
def test_runs_under_gunicorn_with_several_workers(tmp_path, _server):
    port = free_port()
    env = _env(tmp_path, RAFTSCHED__WEBSERVER__SECRET_KEY="s" * 32)
    argv = [
        sys.executable,
        "-m",
        "raftsched",
        "webserver",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--threads",
        "2",
        "--server",
        _server[1],
        "--token",
        TOKEN,
    ]
    process = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = _get(base + "/health")
                break
            except (urllib.error.URLError, ConnectionError):
                assert process.poll() is None, process.stdout.read()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "webserver did not answer within 60 s"
                time.sleep(0.2)
        assert status == 200 and json.loads(body)["leader"] == "127.0.0.1:7101"
        for _ in range(6):
            assert _get(base + "/login")[0] == 200
        status, metrics = _get(base + "/metrics")
        assert status == 200
        # multiprocess mode: one figure summed over both workers' requests
        line = next(
            x
            for x in metrics.splitlines()
            if x.startswith('raftsched_web_requests_total{endpoint="auth.login"')
        )
        assert float(line.rsplit(" ", 1)[1]) == 6.0
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0]
    assert process.returncode == 0, output
    assert "gthread" in output.lower() or "Booting worker" in output
