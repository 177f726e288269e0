"""WebStack: a real cluster, a worker and N webservers behind nginx, for the LB test, the
browser test and ``scripts/bench/web.py``.

    with WebStack(tmp_path, db_url, webservers=2, dags={"hello.py": SOURCE}) as stack:
        stack.start()                      # nodes, leader, user, worker, web farm, /health 200
        web = stack.login()                # an HTTP session through nginx, logged in
        status, headers, body = web.get("/")

Everything is real: three ``raftsched scheduler`` (:class:`~harness.ClusterHarness`, SQLite or
PostgreSQL), ``raftsched worker``, ``raftsched webserver`` (gunicorn) N times and nginx
(:mod:`raftsched.standalone.webfarm`). Tokens are configured, so the webservers and the worker
authenticate like in production. Every wait is bounded; leaving the ``with`` block stops
every process started here (the farm first, then the worker and the nodes).
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import ClusterHarness, Node, child_env, free_ports, wait_for

from raftsched.standalone.webfarm import WebFarm, nginx_available, start_web_farm

ADMIN_TOKEN = "webstack-admin-token-0123456789abcdef"
WORKER_TOKEN = "webstack-worker-token-0123456789abcdef"
SECRET_KEY = "webstack-session-secret-0123456789abcdef"
USERNAME = "admin"
PASSWORD = "webstack-password-123"
ADMIN_OFFSET = 100  # a node's admin /status: Raft port + 100
API_OFFSET = 200  # a node's gRPC API: Raft port + 200

CSRF_INPUT = re.compile(
    r'name="csrf_token"[^>]*value="([^"]+)"|value="([^"]+)"[^>]*name="csrf_token"'
)


@dataclass
class Process(Node):
    """A non-scheduler raftsched process (the worker) stopped with the cluster's nodes."""

    command: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "raftsched", "--config", str(self.config_path), *self.command]


class WebStack:
    def __init__(
        self,
        workdir: Path,
        db_url: str,
        *,
        webservers: int = 2,
        dags: Mapping[str, str] | None = None,
        use_nginx: bool | None = None,
        web_workers: int = 1,
        web_threads: int = 4,
        config: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        ports = free_ports(3, offsets=(0, ADMIN_OFFSET, API_OFFSET))
        api = ",".join(f"127.0.0.1:{port + API_OFFSET}" for port in ports)
        sections: dict[str, dict[str, Any]] = {
            "api": {"admin_tokens": ADMIN_TOKEN, "worker_tokens": WORKER_TOKEN},
            "webserver": {
                "secret_key": SECRET_KEY,
                "token": ADMIN_TOKEN,
                "workers": web_workers,
                "threads": web_threads,
            },
            "worker": {
                "servers": api,
                "token": WORKER_TOKEN,
                "concurrency": 2,
                "heartbeat_interval": 1,
                "lease_ttl": 10,
                "grace_period": 2,
            },
        }
        for section, values in (config or {}).items():
            sections.setdefault(section, {}).update(values)
        self.workdir = Path(workdir)
        self.cluster = ClusterHarness(self.workdir, db_url, dags=dags, config=sections, ports=ports)
        self.webservers = webservers
        self.use_nginx = nginx_available() if use_nginx is None else use_nginx
        self.farm: WebFarm | None = None
        self.worker: Process | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> WebStack:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is not None:
                self.print_logs()
        finally:
            self.close()

    def start(self, *, worker: bool = True, timeout: float = 90.0) -> WebStack:
        deadline = time.monotonic() + timeout
        self.cluster.start()
        self.cluster.wait_leader(timeout=_left(deadline))
        self.create_user(USERNAME, PASSWORD, "admin", timeout=_left(deadline))
        if worker:
            self.start_worker()
        base = free_ports(1, offsets=range(self.webservers + 1))[0]
        self.farm = start_web_farm(
            self.cluster.config_path,
            self.webservers,
            base,
            self.workdir / "web",
            env=child_env(),
            use_nginx=self.use_nginx,
        )
        self.farm.wait_listening(timeout=_left(deadline))
        self.wait_healthy(timeout=_left(deadline))
        return self

    def start_worker(self) -> Process:
        log = self.cluster.log_dir / "worker.log"
        self.worker = Process(
            100, "worker", self.cluster.config_path, log, child_env(), command=["worker"]
        )
        self.worker.start()
        self.cluster.extra.append(self.worker)
        return self.worker

    def close(self) -> None:
        try:
            if self.farm is not None:
                self.farm.stop()
        finally:
            self.cluster.close()

    def print_logs(self) -> None:
        self.cluster.print_logs()
        if self.farm is None:
            return
        logs = [spec.log_path for spec in self.farm.plan.specs]
        logs += [self.farm.plan.run_dir / "error.log"]
        for path in logs:
            with contextlib.suppress(OSError):
                tail = "\n".join(path.read_text(errors="replace").splitlines()[-60:])
                print(f"\n===== {path} =====\n{tail}", file=sys.stderr)

    # -- helpers ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.farm is not None, "start() first"
        return self.farm.url

    def rest(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One REST call (``/api/v1`` + ``path``) with the admin token: (status, JSON body)."""
        request = urllib.request.Request(
            f"{self.url}/api/v1{path}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": f"Bearer {ADMIN_TOKEN}",
                "Accept": "application/json",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def cli(self, *args: str, stdin: str | None = None, timeout: float = 30.0) -> Any:
        """``raftsched --config FILE ARGS`` with the admin token; the CompletedProcess."""
        env = {**child_env(), "RAFTSCHED_TOKEN": ADMIN_TOKEN}
        cmd = [sys.executable, "-m", "raftsched", "--config", str(self.cluster.config_path)]
        return subprocess.run(
            [*cmd, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def create_user(self, username: str, password: str, role: str, timeout: float) -> None:
        last: list[Any] = []

        def created() -> bool:
            done = self.cli(
                "users",
                "create",
                username,
                "--role",
                role,
                "--password-stdin",
                "--replace",
                stdin=password + "\n",
            )
            last[:] = [done.returncode, done.stdout[-500:], done.stderr[-500:]]
            return done.returncode == 0

        wait_for(
            created,
            timeout=timeout,
            what=f"users create {username}",
            interval=0.5,
            describe=lambda: last,
        )

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until /health answers 200 through the front door (nginx, or the only webserver)."""
        session = HttpSession(self.url)
        wait_for(
            lambda: session.get("/health")[0] == 200,
            timeout=timeout,
            what=f"{self.url}/health to answer 200",
            interval=0.25,
            describe=lambda: session.get("/health")[:1],
        )

    def login(self, username: str = USERNAME, password: str = PASSWORD) -> HttpSession:
        session = HttpSession(self.url)
        session.login(username, password)
        return session


def _left(deadline: float) -> float:
    return max(1.0, deadline - time.monotonic())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class HttpSession:
    """A tiny HTTP client with cookies (urllib: no extra dependency). Never raises for an HTTP
    status; connection errors come back as status 0 with the error text as body."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 15.0,
        follow: bool = True,
        cookies: http.cookiejar.CookieJar | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.cookies = cookies if cookies is not None else http.cookiejar.CookieJar()
        handlers: list[Any] = [urllib.request.HTTPCookieProcessor(self.cookies)]
        if not follow:
            handlers.append(_NoRedirect())
        self.opener = urllib.request.build_opener(*handlers)

    def request(
        self, method: str, path: str, data: Mapping[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        req = urllib.request.Request(self.base_url + path, data=body, method=method)
        try:
            with self.opener.open(req, timeout=self.timeout) as resp:
                return resp.status, dict(resp.headers.items()), resp.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers.items()), err.read().decode(errors="replace")
        except (OSError, urllib.error.URLError) as err:
            return 0, {}, repr(err)

    def get(self, path: str) -> tuple[int, dict[str, str], str]:
        return self.request("GET", path)

    def post_form(self, path: str, fields: Mapping[str, str]) -> tuple[int, dict[str, str], str]:
        """GET ``path``, take its CSRF token, POST ``fields`` with it."""
        status, _, page = self.get(path)
        assert status == 200, f"GET {path}: {status}"
        return self.request("POST", path, {**fields, "csrf_token": csrf_token(page)})

    def login(self, username: str, password: str) -> None:
        status, _, page = self.post_form("/login", {"username": username, "password": password})
        assert status == 200 and "Log in</h1>" not in page, f"login failed: {status} {page[:500]}"


def csrf_token(page: str) -> str:
    match = CSRF_INPUT.search(page)
    assert match, f"no csrf_token field in the page: {page[:300]}"
    return match.group(1) or match.group(2)
