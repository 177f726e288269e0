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
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from raftsched.errors import ConfigError
from raftsched.standalone.supervisor import ChildSpec, spawn_child

TEMPLATE_NAME = "raftsched.conf.template"
NGINX_NAME = "nginx"
SECRET_ENV = "RAFTSCHED__WEBSERVER__SECRET_KEY"
_NGINX_FALLBACKS = ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx")


# -- nginx ----------------------------------------------------------------------------------


def nginx_binary() -> str | None:
    """The nginx executable: on PATH, else where Debian and source builds put it."""
    found = shutil.which("nginx")
    if found:
        return found
    return next((p for p in _NGINX_FALLBACKS if os.access(p, os.X_OK)), None)


def nginx_available() -> bool:
    """True when an nginx executable exists and answers ``nginx -v``."""
    binary = nginx_binary()
    if binary is None:
        return False
    try:
        done = subprocess.run([binary, "-v"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def template_path() -> Path:
    """``web/nginx/raftsched.conf.template``, installed (package raftsched.web) or in a checkout."""
    candidates = []
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("raftsched.web")
        if spec is not None and spec.submodule_search_locations:
            candidates += [Path(p) / "nginx" for p in spec.submodule_search_locations]
    candidates.append(Path(__file__).resolve().parents[2] / "web" / "nginx")
    for folder in candidates:
        if (folder / TEMPLATE_NAME).is_file():
            return folder / TEMPLATE_NAME
    raise FileNotFoundError(
        f"nginx template {TEMPLATE_NAME} not found in {', '.join(map(str, candidates))}"
    )


def render_nginx_conf(
    upstreams: Sequence[str],
    *,
    listen: str,
    run_dir: Path | str,
    worker_processes: int | str = 1,
    access_log: str | None = None,
    error_log: str | None = None,
    connect_timeout: str = "1s",
    max_fails: int = 1,
    fail_timeout: str = "5s",
    run_as_root: bool | None = None,
    docker_dns: bool = False,
) -> str:
    """The nginx config for ``upstreams`` (host:port of each webserver).

    ``run_as_root`` (default: whether we are root) adds ``user root;`` so the worker processes
    may use a run dir only root can enter (a test's temp dir); unprivileged, nginx stays the
    user it was started as. ``docker_dns`` re-resolves upstream names through Docker's DNS
    (``resolve``: open-source nginx >= 1.27.3), so a restarted container's new address is used.
    """
    if not upstreams:
        raise ValueError("a web farm needs at least one webserver")
    run_dir = str(run_dir).rstrip("/") or "/"
    if run_as_root is None:
        run_as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    resolve = " resolve" if docker_dns else ""
    servers = "\n".join(
        f"        server {address}{resolve} max_fails={max_fails} fail_timeout={fail_timeout};"
        for address in upstreams
    )
    values = {
        "USER_LINE": "user root;" if run_as_root else "# (nginx runs as the user that starts it)",
        "WORKER_PROCESSES": str(worker_processes),
        "RUN_DIR": run_dir,
        "ERROR_LOG": error_log or f"{run_dir}/error.log",
        "ACCESS_LOG": access_log or f"{run_dir}/access.log",
        "RESOLVER_LINE": (
            "    # Docker's embedded DNS: upstream names are re-resolved as containers restart.\n"
            "    resolver 127.0.0.11 valid=10s ipv6=off;"
            if docker_dns
            else ""
        ),
        "ZONE_LINE": "        zone raftsched_web 64k;" if docker_dns else "",
        "UPSTREAM_SERVERS": servers,
        "LISTEN": listen,
        "TRIES": str(len(upstreams)),
        "CONNECT_TIMEOUT": connect_timeout,
    }
    lines = template_path().read_text(encoding="utf-8").splitlines()
    # A placeholder alone on its line that renders to nothing takes its line with it.
    text = "\n".join(line for line in lines if values.get(line.strip().strip("@"), "x")) + "\n"
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    leftover = sorted(set(re.findall(r"@[A-Z_]+@", text)))
    if leftover:
        raise ValueError(f"nginx template placeholders left unrendered: {leftover}")
    return text


def render_compose_nginx_conf(upstreams: Sequence[str], listen: str = "8080") -> str:
    """The config docker-compose.yml mounts into the official nginx image (>= 1.27.3, for
    ``resolve``): its default user, logs to the container's stdout/stderr, temp under /tmp."""
    return render_nginx_conf(
        upstreams,
        listen=listen,
        run_dir="/tmp",
        worker_processes="auto",
        access_log="/dev/stdout",
        error_log="/dev/stderr",
        connect_timeout="2s",
        run_as_root=False,
        docker_dns=True,
    )


def nginx_argv(conf: Path, run_dir: Path, *, test: bool = False) -> list[str]:
    binary = nginx_binary()
    if binary is None:
        raise ConfigError("nginx is not installed (Debian: apt-get install nginx)")
    argv = [binary, "-p", f"{run_dir}/", "-c", str(conf), "-e", str(run_dir / "error.log")]
    return [*argv, "-t", "-q"] if test else [*argv, "-g", "daemon off;"]


def check_nginx_conf(conf: Path, run_dir: Path) -> None:
    """``nginx -t`` on ``conf``; ConfigError with nginx's own words when it is refused."""
    done = subprocess.run(
        nginx_argv(conf, run_dir, test=True), capture_output=True, text=True, timeout=30
    )
    if done.returncode != 0:
        raise ConfigError(f"nginx refused {conf}: {(done.stderr or done.stdout).strip()}")


# -- the farm -------------------------------------------------------------------------------


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
