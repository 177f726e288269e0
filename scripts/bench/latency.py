#!/usr/bin/env python
"""Dispatch latency and end-to-end task throughput through the gRPC API, 3 nodes + workers.

1. Latency: ``--dags`` DAGs scheduled every second (``* * * * * *``, no catch-up) and real
   ``raftsched worker`` processes. For every task, the delay from its scheduled time (the
   run's logical date) to its arrival on a worker: with ``--mode noop`` the worker's
   ``--record`` file (lease arrival time); with ``--mode bash`` the task itself runs
   ``date +%s.%N`` in its own process and records it with RAFTSCHED_LOGICAL_DATE.
   Prints p50, p99 and max after a warm-up, over ``--duration`` seconds.
2. Throughput: a backlog of ``--backlog`` seconds of catch-up slots for every DAG, completed
   by ``--noop`` workers; tasks per second from the first to the last lease that arrived.

    .venv/bin/python scripts/bench/latency.py --dags 20 --duration 30
    .venv/bin/python scripts/bench/latency.py --mode bash --dags 10

No asserts: prints figures. SQLite metadata DB. Bounded: about duration + throughput-limit +
start-up (~70 s by default).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

from api_harness import ApiCluster
from harness import every_second_dag, utcnow, wait_for, whole_second

WARMUP = 5.0  # seconds of the latency phase not counted (DAG parse, first leases)


def bash_dag(dag_id: str, start: datetime, record: Path) -> str:
    command = f'echo "$RAFTSCHED_LOGICAL_DATE $(date +%s.%N)" >> {record}'
    return textwrap.dedent(
        f"""\
        from datetime import datetime

        from raftsched import DAG, BashTask

        with DAG({dag_id!r}, schedule="* * * * * *",
                 start_date=datetime.fromisoformat({start.isoformat()!r}),
                 catchup=False, max_active_runs=100000, max_active_tasks=1000) as dag:
            BashTask("stamp", command={command!r})
        """
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_phase(args: argparse.Namespace, workdir: Path) -> None:
    record = workdir / "arrivals.jsonl"
    stamps = workdir / "stamps.txt"
    start = whole_second(utcnow()) + timedelta(seconds=2)
    if args.mode == "bash":
        dags = {f"lat_{i}.py": bash_dag(f"lat_{i}", start, stamps) for i in range(args.dags)}
    else:
        dags = {
            f"lat_{i}.py": every_second_dag(f"lat_{i}", start=start, catchup=False)
            for i in range(args.dags)
        }
    config = {"scheduler": {"run_retention_sec": 30}}
    with ApiCluster(
        workdir / "lat", f"sqlite:///{workdir / 'lat.db'}", dags=dags, config=config
    ) as c:
        c.start()
        c.wait_leader()
        for i in range(args.workers):
            c.start_worker(
                f"w{i}",
                concurrency=args.concurrency,
                noop=args.mode == "noop",
                record=record if args.mode == "noop" else None,
            )
        began = time.time()
        time.sleep(args.duration)
        ended = time.time()
        if args.keep:
            print(f"work dir kept: {workdir}")
    delays = []
    if args.mode == "noop":
        for line in record.read_text().splitlines() if record.exists() else []:
            item = json.loads(line)
            logical = datetime.fromisoformat(item["run_id"].split("__", 1)[1]).timestamp()
            if logical >= began + WARMUP:
                delays.append(item["arrived_at"] - logical)
    else:
        for line in stamps.read_text().splitlines() if stamps.exists() else []:
            date, stamp = line.split()
            logical = datetime.fromisoformat(date).timestamp()
            if logical >= began + WARMUP:
                delays.append(float(stamp) - logical)
    window = ended - began - WARMUP
    print(
        f"\nlatency ({args.mode}): {args.dags} DAGs x 1/s, {args.workers} workers"
        f" x {args.concurrency}, {window:.0f}s measured after {WARMUP:.0f}s warm-up"
    )
    if not delays:
        print("  no task arrived: see the node and worker logs (--keep)")
        return
    print(f"  tasks: {len(delays)} ({len(delays) / max(window, 1):.1f}/s)")
    print(
        f"  scheduled -> started on a worker: p50 {statistics.median(delays) * 1000:.0f} ms,"
        f" p99 {percentile(delays, 0.99) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms"
    )


def throughput_phase(args: argparse.Namespace, workdir: Path) -> None:
    record = workdir / "noop.jsonl"
    end = whole_second(utcnow()) - timedelta(seconds=1)
    start = end - timedelta(seconds=args.backlog - 1)
    dags = {
        f"tp_{i}.py": every_second_dag(f"tp_{i}", start=start, end=end, catchup=True)
        for i in range(args.dags)
    }
    expected = args.dags * args.backlog
    with ApiCluster(workdir / "tp", f"sqlite:///{workdir / 'tp.db'}", dags=dags) as c:
        c.start()
        c.wait_leader()
        for i in range(args.workers):
            c.start_worker(f"n{i}", concurrency=args.concurrency, noop=True, record=record)

        def count() -> int:
            return len(record.read_text().splitlines()) if record.exists() else 0

        try:
            wait_for(
                lambda: count() >= expected, timeout=args.limit, what="every task", interval=0.5
            )
        except AssertionError:
            print(f"  throughput phase hit its limit ({args.limit:.0f}s)")
    lines = [json.loads(x) for x in record.read_text().splitlines()] if record.exists() else []
    print(f"\nthroughput (--noop workers): {args.dags} DAGs x {args.backlog} backlog slots")
    if len(lines) < 2:
        print("  fewer than 2 tasks arrived")
        return
    times = sorted(item["arrived_at"] for item in lines)
    span = times[-1] - times[0]
    print(
        f"  {len(lines)} of {expected} tasks leased and completed in {span:.1f}s:"
        f" {len(lines) / max(span, 1e-6):.0f} tasks/s end to end"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dags", type=int, default=20)
    parser.add_argument("--duration", type=float, default=30, help="latency phase, seconds")
    parser.add_argument("--mode", choices=("noop", "bash"), default="noop")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--backlog", type=int, default=60, help="throughput: slots per DAG")
    parser.add_argument("--limit", type=float, default=30, help="throughput: max seconds")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="raftsched-bench-lat-"))
    try:
        latency_phase(args, workdir)
        if not args.skip_throughput:
            throughput_phase(args, workdir)
    finally:
        if args.keep:
            print(f"work dir: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
