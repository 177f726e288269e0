#!/usr/bin/env python3
"""Benchmark: the DAG list page through nginx with two webservers, and the figures it prints.

    .venv/bin/python scripts/bench/web.py                      # HTML, then JSON, then kill-one
    .venv/bin/python scripts/bench/web.py --only html          # one figure (html|json|kill)
    .venv/bin/python scripts/bench/web.py --json               # the JSON list only
    .venv/bin/python scripts/bench/web.py --kill-one           # the HTML list, one webserver
                                                               # killed (kill -9) mid-run
    .venv/bin/python scripts/bench/web.py --clients 16 --seconds 30 --requests 20000
    .venv/bin/python scripts/bench/web.py --direct             # one webserver, no nginx

Starts real processes (three scheduler nodes on SQLite, N ``raftsched webserver`` under
gunicorn, nginx from web/nginx/raftsched.conf.template), loads ``--dags`` DAGs, logs in once
and has ``--clients`` threads GET ``/dags`` (the DAG list: one gRPC ListDags per page) over
keep-alive connections with the session cookie. Bounded by ``--seconds`` AND ``--requests``.
Prints requests/s, latency p50/p90/p99/max, errors and the share each webserver served
(from nginx's X-Upstream header). Load generator and servers share this machine's cores, so
figures are for comparing changes on one machine, not absolute capacity.

Three figures (by default all three, one stack):

- **html**: ``GET /dags`` with the session cookie (the page a person sees);
- **json**: ``GET /api/v1/dags?page_size=25`` with ``Authorization: Bearer <admin token>`` (the
  same list from the REST API);
- **kill**: the html run again, and ``kill -9`` of one webserver (its gunicorn's whole process
  group) a third of the way in: nginx must retry the other webserver, so ``errors`` must be 0.

Each figure also prints the CPU seconds each kind of process spent during the measured
window (from /proc: nginx, the webservers' gunicorn processes, the scheduler nodes, and this
load generator), per request: where a page view's cost goes.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

from webstack import ADMIN_TOKEN, HttpSession, WebStack

PATH = "/dags"  # the DAG list ("/" redirects here)
JSON_PATH = "/api/v1/dags?page_size={dags}"  # the same list from the REST API
TICKS = os.sysconf("SC_CLK_TCK")


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

    def __init__(
        self, url: str, path: str, headers: dict[str, str], quota: int, stop: threading.Event
    ):
        super().__init__(daemon=True)
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.path, self.headers, self.quota, self.stop = path, headers, quota, stop
        # What a good answer contains: the list's marker (HTML) or its first field (JSON).
        self.marker = b'"dags"' if path.startswith("/api/") else b"dag-list"
        self.latencies: list[float] = []
        self.errors: Counter[str] = Counter()
        self.upstreams: Counter[str] = Counter()

    def run(self) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        headers = self.headers
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
                if resp.status != 200 or self.marker not in body:
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
    parser.add_argument(
        "--only",
        choices=("html", "json", "kill"),
        action="append",
        help="run only these figures (repeatable; default: html, json and kill)",
    )
    parser.add_argument("--json", action="store_true", help="same as --only json")
    parser.add_argument("--kill-one", action="store_true", help="same as --only kill")
    args = parser.parse_args()
    figures = list(args.only or [])
    figures += ["json"] * args.json + ["kill"] * args.kill_one
    figures = list(dict.fromkeys(figures)) or ["html", "json", "kill"]
    if "kill" in figures and args.direct:
        raise SystemExit("--kill-one needs nginx and two webservers: drop --direct")

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
            html = (PATH, {"Cookie": cookie, "Accept": "text/html"})
            json_path = JSON_PATH.format(dags=min(args.dags, 1000))
            api = (json_path, {"Authorization": f"Bearer {ADMIN_TOKEN}"})
            for figure in figures:
                path, headers = api if figure == "json" else html
                if args.warmup > 0:
                    run_clients(stack.url, path, headers, args, args.warmup)
                before = cpu_by_kind(stack)
                killer = None
                if figure == "kill":
                    killer = threading.Timer(args.seconds / 3, kill_one, (stack,))
                    killer.start()
                elapsed, clients = run_clients(stack.url, path, headers, args, args.seconds)
                if killer is not None:
                    killer.cancel()
                cpu = cpu_delta(before, cpu_by_kind(stack))
                report(args, figure, path, webservers, elapsed, clients, cpu)
                if figure == "kill":
                    print_nginx_errors(stack)
    return 0


def kill_one(stack: WebStack) -> None:
    """kill -9 the first webserver (gunicorn master and workers: its process group)."""
    assert stack.farm is not None
    name = next(n for n in stack.farm.procs if n.startswith("web-"))
    pid = stack.farm.procs[name].pid
    stack.farm.kill(name, signal.SIGKILL)
    print(f"  (killed {name}, pid {pid}, with SIGKILL during the run)", flush=True)


def print_nginx_errors(stack: WebStack) -> None:
    """What nginx logged about its upstreams (how it saw the kill), counted by message."""
    assert stack.farm is not None
    path = stack.farm.plan.run_dir / "error.log"
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    seen: Counter[str] = Counter()
    for line in lines:
        if "upstream" in line:
            message = line.partition("*")[2].partition(",")[0]
            seen[message.split(" ", 1)[-1][:120]] += 1
    for message, count in seen.most_common(6):
        print(f"  nginx log  {count} x {message}")


# -- CPU per process kind (from /proc; Linux) ----------------------------------------------


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rpartition(")")[2].split()[1])
            out.setdefault(ppid, []).append(int(entry))
    return out


def _cpu_ticks(pid: int) -> int:
    """utime + stime of one process (its own threads), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def cpu_by_kind(stack: WebStack) -> dict[str, dict[int, int]]:
    """kind -> {pid: CPU ticks} for every live process of the stack and its children."""
    tree = _children()

    def family(root: int) -> list[int]:
        out, todo = [], [root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo += tree.get(pid, [])
        return out

    roots: dict[str, list[int]] = {"nginx": [], "webservers": [], "nodes": []}
    assert stack.farm is not None
    for name, proc in stack.farm.procs.items():
        roots["webservers" if name.startswith("web-") else "nginx"].append(proc.pid)
    roots["nodes"] = [n.pid for n in stack.cluster.nodes if n.pid is not None]
    out = {
        kind: {pid: _cpu_ticks(pid) for root in pids for pid in family(root)}
        for kind, pids in roots.items()
    }
    out["bench"] = {os.getpid(): _cpu_ticks(os.getpid())}
    return out


def cpu_delta(before: dict[str, dict[int, int]], after: dict[str, dict[int, int]]) -> dict:
    """kind -> CPU seconds spent between the two samples (processes that died: not counted
    after their death; processes born in between: all of their time)."""
    return {
        kind: sum(max(0, t - before.get(kind, {}).get(pid, 0)) for pid, t in pids.items()) / TICKS
        for kind, pids in after.items()
    }


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
    url: str, path: str, headers: dict[str, str], args: argparse.Namespace, seconds: float
) -> tuple[float, list[Client]]:
    stop = threading.Event()
    quota = max(1, args.requests // args.clients)
    clients = [Client(url, path, headers, quota, stop) for _ in range(args.clients)]
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
    args: argparse.Namespace,
    figure: str,
    path: str,
    webservers: int,
    elapsed: float,
    clients: list[Client],
    cpu: dict[str, float],
) -> None:
    latencies = sorted(x for c in clients for x in c.latencies)
    errors = sum((c.errors for c in clients), Counter())
    upstreams = sum((c.upstreams for c in clients), Counter())
    total = len(latencies)
    front = "direct to one webserver" if args.direct else f"nginx -> {webservers} webservers"
    what = {"html": "HTML", "json": "JSON, REST API", "kill": "HTML, one webserver killed"}
    print(
        f"raftsched web bench [{figure}]: GET {path} (DAG list, {args.dags} DAGs,"
        f" {what[figure]}), {front}"
    )
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
    failed = sum(errors.values())
    print(
        f"  errors     {failed} {dict(errors) if errors else ''}"
        + ("  (failed requests while a webserver was killed)" if figure == "kill" else "")
    )
    shares = ", ".join(f"{k} {v / max(1, total):.0%}" for k, v in sorted(upstreams.items()))
    print(f"  served by  {shares}")
    per = max(1, total)
    print(
        "  CPU s      "
        + "  ".join(f"{kind} {secs:.2f}" for kind, secs in cpu.items())
        + "  | ms/request "
        + "  ".join(f"{kind} {secs * 1000 / per:.2f}" for kind, secs in cpu.items()),
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
