"""N webservers on loopback behind a local nginx: what ``raftsched standalone`` and
``scripts/run_webservers.py`` start besides the scheduler nodes.

    farm = start_web_farm("raftsched.cfg", 2, 8080, Path("run/web"))
    farm.wait_listening(timeout=30)
    print(farm.url)       # http://127.0.0.1:8080  (nginx; webservers on 8081, 8082)
    farm.pids()           # {"web-8081": 1234, "web-8082": 1235, "nginx": 1236}
    farm.stop()

Ports: nginx listens on ``base_port`` and webserver i on ``base_port + 1 + i``. Without nginx
(:func:`nginx_available` is false, or ``use_nginx=False``) the webservers take ``base_port``,
``base_port + 1``, ... and :attr:`WebFarm.url` is the first one's.

Each webserver is ``python -m raftsched --config FILE webserver --bind 127.0.0.1:PORT``; it reads
everything else (gRPC servers, token, gunicorn workers) from the config. The webservers of one
farm must sign session cookies with the same ``[webserver] secret_key`` (no sticky sessions);
when the config leaves it empty, the farm makes one up and gives it to all of them.

nginx runs unprivileged with everything it writes under ``run_dir``
(``nginx -p RUN_DIR -c RUN_DIR/nginx.conf -e RUN_DIR/error.log -g 'daemon off;'``), from the
template ``web/nginx/raftsched.conf.template`` (its comments explain the retry and passive
health-check choices). :func:`plan_web_farm` gives the same processes as
:class:`~raftsched.standalone.supervisor.ChildSpec` for a supervisor that restarts them.

Not thread-safe; every child runs in its own session (``stop`` signals whole process groups,
so gunicorn's workers go with their master) and gets SIGTERM if its parent thread dies.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from raftsched.standalone.nginx import (
    NGINX_NAME,
    TEMPLATE_NAME,
    check_nginx_conf,
    nginx_argv,
    nginx_available,
    nginx_binary,
    render_compose_nginx_conf,
    render_nginx_conf,
    template_path,
)
from raftsched.standalone.supervisor import ChildSpec, spawn_child

__all__ = [  # the nginx helpers, where callers have always found them
    "NGINX_NAME",
    "TEMPLATE_NAME",
    "check_nginx_conf",
    "nginx_argv",
    "nginx_available",
    "nginx_binary",
    "render_compose_nginx_conf",
    "render_nginx_conf",
    "template_path",
]

SECRET_ENV = "RAFTSCHED__WEBSERVER__SECRET_KEY"


@dataclass(frozen=True)
class FarmPlan:
    """What a farm runs: each child's spec, where it listens, and the URL to browse."""

    url: str
    web_addresses: tuple[str, ...]
    lb_address: str | None  # None: no nginx
    specs: tuple[ChildSpec, ...]  # webservers first, nginx last
    run_dir: Path
    conf_path: Path | None

    @property
    def addresses(self) -> dict[str, str]:
        """child name -> host:port it listens on."""
        names = [spec.name for spec in self.specs]
        listed = [*self.web_addresses, *([self.lb_address] if self.lb_address else [])]
        return dict(zip(names, listed, strict=True))


def plan_web_farm(
    config: str | os.PathLike[str],
    n: int,
    base_port: int,
    run_dir: Path | str,
    *,
    env: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
    use_nginx: bool | None = None,
    python: str = sys.executable,
) -> FarmPlan:
    """Write nginx.conf under ``run_dir`` (checked with ``nginx -t``) and describe the children.

    ``env`` (default: this process's) is every child's environment; a shared secret key is
    added when neither it nor the config sets one. Raises ConfigError for a bad config or an
    nginx config nginx refuses.
    """
    from raftsched.config import load_config

    if n < 1:
        raise ValueError(f"a web farm needs at least one webserver, not {n}")
    run_dir = Path(run_dir).absolute()
    log_dir = run_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    config_path = Path(config).absolute()
    settings = load_config(config_path, env=child_env)
    if not settings.webserver.secret_key and not child_env.get(SECRET_ENV):
        child_env[SECRET_ENV] = secrets.token_urlsafe(32)
    use_nginx = nginx_available() if use_nginx is None else use_nginx
    if use_nginx:
        # Exactly one proxy (this nginx) in front: Flask may trust its X-Forwarded-* headers.
        child_env.setdefault("RAFTSCHED_WEB_PROXY_FIX", "1")

    first = base_port + 1 if use_nginx else base_port
    web = tuple(f"{host}:{first + i}" for i in range(n))
    base = [python, "-m", "raftsched", "--config", str(config_path), "webserver", "--bind"]
    specs = [
        ChildSpec(
            name=f"web-{port}",
            argv=[*base, address],
            log_path=log_dir / f"web-{port}.log",
            # Each gunicorn keeps its /metrics files in the run dir, not in a temp dir that a
            # kill -9 would leave behind.
            env={"PROMETHEUS_MULTIPROC_DIR": str(run_dir / "metrics" / port), **child_env},
            cwd=run_dir,
        )
        for address in web
        for port in [address.rpartition(":")[2]]
    ]
    if not use_nginx:
        return FarmPlan(f"http://{web[0]}", web, None, tuple(specs), run_dir, None)

    lb = f"{host}:{base_port}"
    conf = run_dir / "nginx.conf"
    conf.write_text(render_nginx_conf(web, listen=lb, run_dir=run_dir), encoding="utf-8")
    check_nginx_conf(conf, run_dir)
    nginx = ChildSpec(
        name=NGINX_NAME,
        argv=nginx_argv(conf, run_dir),
        log_path=log_dir / "nginx.log",
        env=child_env,
        cwd=run_dir,
    )
    return FarmPlan(f"http://{lb}", web, lb, (*specs, nginx), run_dir, conf)


@dataclass
class WebFarm:
    """Running children of a :class:`FarmPlan`, by name."""

    plan: FarmPlan
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.plan.url

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items()}

    def start(self, name: str | None = None) -> None:
        """Start one child (by name) or every child that is not running."""
        for spec in self.plan.specs:
            if name not in (None, spec.name):
                continue
            proc = self.procs.get(spec.name)
            if proc is None or proc.poll() is not None:
                self.procs[spec.name] = spawn_child(spec)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the child's whole process group (kill -9 by default) and reap it."""
        proc = self.procs[name]
        _signal_group(proc, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def wait_listening(self, timeout: float = 30.0, names: Sequence[str] | None = None) -> None:
        """Wait until each child (default: all) accepts TCP connections on its port.
        RuntimeError naming the child and its log when one exits or the time runs out."""
        deadline = time.monotonic() + timeout
        for name in names or list(self.plan.addresses):
            address = self.plan.addresses[name]
            spec = next(s for s in self.plan.specs if s.name == name)
            while not _accepts(address):
                proc = self.procs.get(name)
                if proc is None or proc.poll() is not None:
                    code = None if proc is None else proc.returncode
                    raise RuntimeError(f"{name} is not running (exit {code}); see {spec.log_path}")
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"{name} did not listen on {address} within {timeout:.0f}s;"
                        f" see {spec.log_path}"
                    )
                time.sleep(0.1)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM every child's process group (nginx first), wait, then SIGKILL. Idempotent."""
        procs = list(reversed(self.procs.values()))
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            _kill_orphans(proc.pid)

    def __enter__(self) -> WebFarm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_web_farm(
    config: str | os.PathLike[str],
    n: int,
    base_port: int,
    run_dir: Path | str,
    *,
    env: Mapping[str, str] | None = None,
    use_nginx: bool | None = None,
) -> WebFarm:
    """Plan the farm (see :func:`plan_web_farm`) and start every child; returns at once (use
    :meth:`WebFarm.wait_listening`). Stops what it started if a start fails."""
    farm = WebFarm(plan_web_farm(config, n, base_port, run_dir, env=env, use_nginx=use_nginx))
    try:
        farm.start()
    except BaseException:
        farm.stop()
        raise
    return farm


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the group the child leads (it was started in its own session). Only while the
    child is not reaped: its pid, and so its group id, cannot belong to anyone else."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _kill_orphans(pgid: int) -> None:
    """SIGKILL what is left of a reaped leader's group (say gunicorn workers whose master was
    killed). Linux only. While any member lives the kernel does not hand the group's id out
    again, and a group whose leader pid is alive again is someone else's: left alone."""
    members: list[int] = []
    for entry in Path("/proc").glob("[0-9]*/stat") if sys.platform == "linux" else []:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = entry.read_text().rpartition(")")[2].split()
            if int(fields[2]) == pgid:  # fields: state ppid pgrp ...
                members.append(int(entry.parent.name))
    if pgid in members:
        return
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False
