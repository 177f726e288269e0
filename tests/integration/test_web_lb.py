"""Invariant 6 at the front door: nginx routes around a webserver killed with -9.

Real processes only: three ``raftsched scheduler`` nodes, two ``raftsched webserver``
(gunicorn) and nginx rendered from web/nginx/raftsched.conf.template. One logged-in client
loops over the DAG list and /health through nginx (bounded by a request count AND a deadline)
while one webserver's whole process group gets SIGKILL: not one request may fail. Then the
victim is started again and traffic must come back to it.

Who answered is read from ``X-Upstream`` (nginx: ``add_header X-Upstream $upstream_addr``);
after a retry it lists every webserver tried, the last one answered.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from harness import wait_for
from webstack import HttpSession, WebStack

from raftsched.standalone.webfarm import nginx_available

pytestmark = pytest.mark.slow

HELLO_DAG = """
from raftsched import DAG, BashTask

with DAG("lb_hello", schedule=None):
    BashTask("say", command="echo hello")
"""

# One hop each (no redirect), so X-Upstream tells who answered every request.
PATHS = ("/dags", "/health")


@dataclass
class Tally:
    """What a request loop saw: answers per webserver, retried requests, failures."""

    served: dict[str, int] = field(default_factory=dict)
    retried: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    requests: int = 0

    def record(self, path: str, status: int, headers: dict[str, str], body: str) -> str:
        self.requests += 1
        tried = [a.strip() for a in headers.get("X-Upstream", "").split(",") if a.strip()]
        if status != 200 or not tried:
            self.failures.append(f"GET {path}: {status} upstream={tried} {body[:200]!r}")
            return ""
        if path == "/dags" and 'id="dag-list"' not in body:
            self.failures.append(f"GET /dags: 200 from {tried} without the DAG list")
        if len(tried) > 1:
            self.retried.append(", ".join(tried))
        self.served[tried[-1]] = self.served.get(tried[-1], 0) + 1
        return tried[-1]


def loop(
    session: HttpSession,
    tally: Tally,
    *,
    max_requests: int,
    seconds: float,
    stop: threading.Event | None = None,
    until_served_by: str | None = None,
    pause: float = 0.0,
) -> None:
    """GET the PATHS in turn until ``max_requests``, ``seconds``, ``stop``, or (if given) a
    response answered by ``until_served_by`` — whichever comes first; ``pause`` seconds
    between requests."""
    deadline = time.monotonic() + seconds
    for i in range(max_requests):
        if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
            return
        path = PATHS[i % len(PATHS)]
        answered = tally.record(path, *session.get(path))
        if until_served_by is not None and answered == until_served_by:
            return
        if pause:
            time.sleep(pause)


def test_nginx_routes_around_a_killed_webserver(tmp_path: Path, sqlite_url: str) -> None:
    if not nginx_available():
        if os.environ.get("CI") == "true":
            pytest.fail("nginx is not installed; scripts/test installs it")
        pytest.skip("nginx is not installed (apt-get install nginx)")
    with WebStack(tmp_path, sqlite_url, webservers=2, dags={"hello.py": HELLO_DAG}) as stack:
        stack.start(worker=False)
        farm = stack.farm
        assert farm is not None and farm.plan.lb_address is not None
        web = {name: addr for name, addr in farm.plan.addresses.items() if name != "nginx"}
        (_, survivor_addr), (victim, victim_addr) = sorted(web.items())
        # The session cookie must be good on both webservers; a redirect counts as a failure.
        session = HttpSession(stack.url, follow=False, cookies=stack.login().cookies)

        # Round robin: both webservers answer.
        warmup = Tally()
        loop(session, warmup, max_requests=40, seconds=20)
        assert not warmup.failures, warmup.failures
        assert set(warmup.served) == {survivor_addr, victim_addr}, warmup.served

        # kill -9 the victim (gunicorn master and workers) while requests keep coming.
        during = Tally()
        stop = threading.Event()
        client = threading.Thread(
            target=loop,
            args=(session, during),
            kwargs={"max_requests": 5000, "seconds": 40, "stop": stop, "pause": 0.005},
            daemon=True,
        )
        client.start()
        wait_for(lambda: during.requests >= 10, timeout=20, what="10 requests before the kill")
        farm.kill(victim)
        killed_at, killed_time = during.requests, time.monotonic()
        # Past fail_timeout (5 s), so nginx tries the dead webserver again at least once.
        wait_for(
            lambda: (
                (during.requests >= killed_at + 60 and time.monotonic() - killed_time > 6)
                or not client.is_alive()
            ),
            timeout=30,
            what="60 requests and 6 s after the kill",
        )
        stop.set()
        client.join(timeout=20)
        assert not client.is_alive()
        assert not during.failures, f"{len(during.failures)} failed: {during.failures[:5]}"
        assert during.requests >= killed_at + 60
        # nginx did route around it: a request that reached the dead webserver was retried.
        assert any(t.startswith(victim_addr) for t in during.retried), during.retried

        after = Tally()
        loop(session, after, max_requests=20, seconds=20)
        assert not after.failures, after.failures
        assert set(after.served) == {survivor_addr}, after.served

        # Bring it back: once its fail_timeout (5 s) is over nginx tries it again and it
        # serves. Paced, so the deadline (not the count) bounds the wait.
        farm.start(victim)
        farm.wait_listening(timeout=30, names=[victim])
        back = Tally()
        loop(
            session,
            back,
            max_requests=3000,
            seconds=30,
            until_served_by=victim_addr,
            pause=0.01,
        )
        assert not back.failures, back.failures
        assert back.served.get(victim_addr), f"traffic never came back: {back.served}"
        balanced = Tally()
        loop(session, balanced, max_requests=20, seconds=20)
        assert not balanced.failures, balanced.failures
        assert set(balanced.served) == {survivor_addr, victim_addr}, balanced.served
        print(
            f"\nLB: {during.requests} requests around the kill, 0 failed, retried on the"
            f" survivor: {len(during.retried)}; served after the restart: {back.served}"
        )
