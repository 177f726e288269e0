"""nginx in front of the webservers of a ``raftsched standalone`` farm: finding the binary,
rendering its config from ``web/nginx/raftsched.conf.template`` (whose comments explain the
retry and passive health-check choices) and checking it with ``nginx -t``. nginx runs
unprivileged with everything it writes under ``run_dir``."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from raftsched.errors import ConfigError

TEMPLATE_NAME = "raftsched.conf.template"
NGINX_NAME = "nginx"
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
