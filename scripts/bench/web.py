#!/usr/bin/env python3
"""Benchmark: the DAG list page through nginx with two webservers, and the figures it prints.

    .venv/bin/python scripts/bench/web.py                      # 8 clients, 15 s, 2 webservers
    .venv/bin/python scripts/bench/web.py --clients 16 --seconds 30 --requests 20000
    .venv/bin/python scripts/bench/web.py --direct             # one webserver, no nginx

Starts real processes (three scheduler nodes on SQLite, N ``raftsched webserver`` under
gunicorn, nginx from web/nginx/raftsched.conf.template), loads ``--dags`` DAGs, logs in once
and has ``--clients`` threads GET ``/dags`` (the DAG list: one gRPC ListDags per page) over
keep-alive connections with the session cookie. Bounded by ``--seconds`` AND ``--requests``.
Prints requests/s, latency p50/p90/p99/max, errors and the share each webserver served
(from nginx's X-Upstream header). Load generator and servers share this machine's cores, so
figures are for comparing changes on one machine, not absolute capacity.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

from webstack import HttpSession, WebStack

PATH = "/dags"  # the DAG list ("/" redirects here)


def dag_file(count: int) -> str:
    lines = ["from raftsched import DAG, BashTask", ""]
    for i in range(count):
        lines += [
            f'with DAG("bench_{i:03d}", schedule="*/5 * * * *", tags=["bench"]):',
            '    BashTask("noop", command="true")',
        ]
    return "\n".join(lines) + "\n"


class Client(threading.Thread):
    """One keep-alive connection, GET path in a loop until the shared stop or its quota."""

    def __init__(self, url: str, path: str, cookie: str, quota: int, stop: threading.Event):
        super().__init__(daemon=True)
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.path, self.cookie, self.quota, self.stop = path, cookie, quota, stop
        self.latencies: list[float] = []
        self.errors: Counter[str] = Counter()
        self.upstreams: Counter[str] = Counter()

    def run(self) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = {"Cookie": self.cookie, "Accept": "text/html"}
        try:
            while not self.stop.is_set() and len(self.latencies) < self.quota:
                started = time.perf_counter()
                try:
                    conn.request("GET", self.path, headers=headers)
                    resp = conn.getresponse()
                    body = resp.read()
                except (OSError, http.client.HTTPException) as err:
                    self.errors[type(err).__name__] += 1
                    conn.close()
                    conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                    continue
                self.latencies.append(time.perf_counter() - started)
                if resp.status != 200 or b"dag-list" not in body:
                    self.errors[f"HTTP {resp.status}"] += 1
                upstream = resp.getheader("X-Upstream") or "direct"
                self.upstreams[upstream.split(",")[-1].strip()] += 1
        finally:
            conn.close()


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8, help="concurrent connections (8)")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds (15)")
    parser.add_argument("--requests", type=int, default=50_000, help="request cap (50000)")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds (2)")
    parser.add_argument("--webservers", type=int, default=2, help="webservers (2)")
    parser.add_argument("--web-workers", type=int, default=2, help="gunicorn workers each (2)")
    parser.add_argument("--threads", type=int, default=4, help="gunicorn threads each (4)")
    parser.add_argument("--dags", type=int, default=25, help="DAGs listed on the page (25)")
    parser.add_argument("--direct", action="store_true", help="one webserver, no nginx")
    args = parser.parse_args()

    webservers = 1 if args.direct else args.webservers
    with tempfile.TemporaryDirectory(prefix="raftsched-bench-web-") as tmp:
        workdir = Path(tmp)
        db_url = f"sqlite:///{workdir / 'bench.db'}"
        stack = WebStack(
            workdir,
            db_url,
            webservers=webservers,
            dags={"bench.py": dag_file(args.dags)},
            use_nginx=not args.direct,
            web_workers=args.web_workers,
            web_threads=args.threads,
        )
        with stack:
            stack.start(worker=False, timeout=120)
            session = stack.login()
            wait_listed(session, args.dags)
            cookie = "; ".join(f"{c.name}={c.value}" for c in session.cookies)
            if args.warmup > 0:
                run_clients(stack.url, cookie, args.clients, args.warmup, args.requests)
            elapsed, clients = run_clients(
                stack.url, cookie, args.clients, args.seconds, args.requests
            )
    report(args, webservers, elapsed, clients)
    return 0


def wait_listed(session: HttpSession, count: int, timeout: float = 60.0) -> None:
    """Until the DAG list shows every bench DAG (the leader parses the file first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _, body = session.get(PATH + "?search=bench_")
        if status == 200 and body.count('data-dag="bench_') >= min(count, 50):
            return
        time.sleep(0.5)
    raise SystemExit(f"the {count} bench DAGs did not show up in the list within {timeout:.0f}s")


def run_clients(
    url: str, cookie: str, count: int, seconds: float, cap: int
) -> tuple[float, list[Client]]:
    stop = threading.Event()
    quota = max(1, cap // count)
    clients = [Client(url, PATH, cookie, quota, stop) for _ in range(count)]
    started = time.perf_counter()
    for client in clients:
        client.start()
    deadline = started + seconds
    while time.perf_counter() < deadline and any(c.is_alive() for c in clients):
        time.sleep(0.05)
    stop.set()
    for client in clients:
        client.join(timeout=40)
    return time.perf_counter() - started, clients


def report(
    args: argparse.Namespace, webservers: int, elapsed: float, clients: list[Client]
) -> None:
    latencies = sorted(x for c in clients for x in c.latencies)
    errors = sum((c.errors for c in clients), Counter())
    upstreams = sum((c.upstreams for c in clients), Counter())
    total = len(latencies)
    front = "direct to one webserver" if args.direct else f"nginx -> {webservers} webservers"
    print(f"raftsched web bench: GET {PATH} (DAG list, {args.dags} DAGs), {front}")
    print(
        f"  gunicorn: {args.web_workers} workers x {args.threads} threads each;"
        f" {args.clients} keep-alive clients; {elapsed:.1f} s measured"
    )
    print(f"  requests   {total}  ({total / elapsed:.1f} req/s)")
    if latencies:
        ms = [x * 1000 for x in latencies]
        print(
            f"  latency ms p50 {percentile(ms, 0.50):.1f}  p90 {percentile(ms, 0.90):.1f}"
            f"  p99 {percentile(ms, 0.99):.1f}  max {ms[-1]:.1f}  mean {statistics.mean(ms):.1f}"
        )
    print(f"  errors     {sum(errors.values())} {dict(errors) if errors else ''}")
    shares = ", ".join(f"{k} {v / max(1, total):.0%}" for k, v in sorted(upstreams.items()))
    print(f"  served by  {shares}")


if __name__ == "__main__":
    sys.exit(main())
