"""`raftsched webserver`: the web UI under gunicorn (``raftsched.web:create_app()``).

The command checks the config (a secret_key, the cluster's addresses), then execs gunicorn
with ``-c python:raftsched.web.gunicorn_conf``, which reads ``[webserver] bind, workers,
worker_class, threads`` from the same config. Flags override the config by setting the
matching ``RAFTSCHED__WEBSERVER__*`` variable for gunicorn and its workers:

    --bind HOST:PORT        [webserver] bind
    --workers N             [webserver] workers
    --threads N             [webserver] threads
    --server H:P[,H:P...]   [webserver] grpc_servers (default: $RAFTSCHED_SERVER, then the
                            config, then every [cluster] node's Raft port + 200)
    --token TOKEN           [webserver] token (default: $RAFTSCHED_TOKEN, then the config)

Environment the webserver reads besides the config: ``RAFTSCHED_WEB_<FLASK_SETTING>`` (e.g.
``RAFTSCHED_WEB_SESSION_COOKIE_SECURE=true``, ``RAFTSCHED_WEB_PROXY_FIX=1``; see
raftsched/web/settings.py), ``PROMETHEUS_MULTIPROC_DIR`` (default: a fresh temporary
directory, removed on exit) and ``FORWARDED_ALLOW_IPS`` (gunicorn's; default 127.0.0.1).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping

from raftsched.cli.common import positive_int
from raftsched.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "webserver",
        help="run the web UI (gunicorn, [webserver] settings)",
        description="Run the web UI under gunicorn with the app factory"
        " raftsched.web:create_app(). It reaches the cluster over gRPC only and keeps no state:"
        " run as many as you like behind a load balancer, with the same [webserver] secret_key.",
    )
    parser.add_argument("--bind", metavar="HOST:PORT", help="listen here ([webserver] bind)")
    parser.add_argument("--workers", type=positive_int, metavar="N", help="worker processes")
    parser.add_argument("--threads", type=positive_int, metavar="N", help="threads per worker")
    parser.add_argument(
        "--server",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="gRPC addresses of the scheduler nodes (default: $RAFTSCHED_SERVER, else"
        " [webserver] grpc_servers, else each [cluster] node's Raft port + 200)",
    )
    parser.add_argument(
        "--token",
        help="API token the webserver sends (admin role; default: $RAFTSCHED_TOKEN, else"
        " [webserver] token)",
    )
    parser.set_defaults(handler=run)


def gunicorn_env(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, str]:
    """The environment for gunicorn: the flags as RAFTSCHED__WEBSERVER__* overrides."""
    out = dict(env)
    if args.config:
        out["RAFTSCHED_CONFIG"] = os.path.abspath(os.path.expanduser(args.config))
    server = args.server or env.get("RAFTSCHED_SERVER")
    token = args.token or env.get("RAFTSCHED_TOKEN")
    for key, value in (
        ("BIND", args.bind),
        ("WORKERS", args.workers),
        ("THREADS", args.threads),
        ("GRPC_SERVERS", server),
        ("TOKEN", token),
    ):
        if value:
            out[f"RAFTSCHED__WEBSERVER__{key}"] = str(value)
    return out


def check(env: Mapping[str, str]) -> None:
    """Fail now, with one line, on what would make every worker fail later."""
    from raftsched.config import load_config

    config = load_config(env=env)
    if not config.webserver.secret_key:
        raise ConfigError(
            "[webserver] secret_key is empty: set it to a long random text, the same on every"
            " webserver (it signs the session cookies), e.g. RAFTSCHED__WEBSERVER__SECRET_KEY",
            key="webserver.secret_key",
        )


def run(args: argparse.Namespace) -> int:
    env = gunicorn_env(args, os.environ)
    check(env)
    if not env.get("PROMETHEUS_MULTIPROC_DIR"):  # gunicorn_conf removes it on exit
        env["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="raftsched-web-metrics-")
        env["RAFTSCHED_WEB_METRICS_DIR_OWNED"] = "1"
    argv = [sys.executable, "-m", "gunicorn", "-c", "python:raftsched.web.gunicorn_conf"]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
    return 0  # pragma: no cover (execve does not return)
