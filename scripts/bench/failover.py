#!/usr/bin/env python
"""Failover time: kill -9 the leader of a settled 3-node cluster, N times, and measure.

For each kill: the time from the kill to a new leader being elected (its ``became_leader_at``,
else the first poll that shows it) and to that leader's first committed decision
(``first_commit_at``). /status of the survivors is polled every ~5 ms. The victim is
restarted and the cluster left to settle before the next kill. SQLite, loopback, example-free
dags folder with two 1-second DAGs so the leader always has work to commit.

    .venv/bin/python scripts/bench/failover.py --kills 10
    .venv/bin/python scripts/bench/failover.py --kills 0 --watch 600   # a quiet window

``--watch SECONDS`` first watches the settled cluster that long (nothing but the two 1-second
DAGs) and counts elections: Raft terms begun during the window, from every node's /status
polled every 0.5 s (a quiet cluster must have none). The host's load average is printed with
each figure: other processes on the machine stretch every timing here.

Prints one line per kill and the median and max. No asserts: figures only.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

from harness import ClusterHarness, second_dags, utcnow, wait_for, whole_second


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--poll", type=float, default=0.005, help="status poll interval")
    parser.add_argument("--watch", type=float, default=0.0, help="quiet seconds to watch first")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="raftsched-bench-failover-"))
    db_url = f"sqlite:///{workdir / 'raftsched.db'}"
    start = whole_second(utcnow()) - timedelta(seconds=2)
    dags = {
        name: src.replace("catchup=True", "catchup=False")
        for name, src in second_dags(2, start=start, end=None).items()
    }
    rows: list[tuple[int, str, str, float, float | None]] = []
    with ClusterHarness(workdir, db_url, dags=dags) as cluster:
        cluster.start()
        cluster.wait_leader(timeout=60)
        cluster.wait_caught_up(timeout=60, outbox=False)
        print(f"cluster up: {', '.join(cluster.addresses)} (work dir {workdir})", flush=True)
        if args.watch > 0:
            _watch_elections(cluster, args.watch)
        for kill in range(1, args.kills + 1):
            time.sleep(args.settle)
            victim = cluster.wait_leader(timeout=60)
            survivors = [n for n in cluster.nodes if n.index != victim]
            killed_at = time.time()
            os.kill(cluster.nodes[victim].pid or 0, signal.SIGKILL)
            cluster.nodes[victim].proc.wait(timeout=10)  # type: ignore[union-attr]
            elected, status = _poll_new_leader(survivors, cluster.addresses[victim], args.poll)
            new_leader = status["address"]
            if status.get("became_leader_at"):
                elected = float(status["became_leader_at"])
            first_commit = _poll_first_commit(survivors, new_leader, args.poll)
            rows.append(
                (
                    kill,
                    cluster.addresses[victim],
                    new_leader,
                    elected - killed_at,
                    None if first_commit is None else first_commit - killed_at,
                )
            )
            k, old, new, to_leader, to_commit = rows[-1]
            shown = "n/a" if to_commit is None else f"{to_commit * 1000:7.0f} ms"
            print(
                f"kill {k:2d}: {old} -> {new}: new leader after {to_leader * 1000:7.0f} ms,"
                f" first commit after {shown}",
                flush=True,
            )
            cluster.start_node(victim)
            wait_for(
                lambda: all(n.status() for n in cluster.nodes),
                timeout=60,
                what="the restarted node to answer",
            )
            cluster.wait_caught_up(timeout=60, outbox=False)
    _summary(rows)
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cpus)"


def _watch_elections(cluster, seconds: float) -> None:  # type: ignore[no-untyped-def]
    """Count the Raft terms begun in ``seconds`` of a quiet cluster (every node polled)."""
    print(f"watching {seconds:.0f} s for elections; {_load()}", flush=True)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    leaders: list[tuple[float, str]] = []
    end = time.time() + seconds
    while time.time() < end:
        for node in cluster.nodes:
            status = node.status(timeout=0.5) or {}
            term = status.get("term", status.get("raft_term"))
            if term is None:
                continue
            first.setdefault(node.index, int(term))
            last[node.index] = int(term)
            if status.get("role") == "leader" and (not leaders or leaders[-1][1] != node.address):
                leaders.append((time.time(), node.address))
        time.sleep(0.5)
    elections = max((last[i] - first[i] for i in last), default=0)
    print(
        f"quiet window {seconds:.0f} s: {elections} elections (terms per node {first} -> {last});"
        f" leaders seen {[a for _, a in leaders]}; {_load()}",
        flush=True,
    )


def _poll_new_leader(survivors, old_address: str, interval: float):  # type: ignore[no-untyped-def]
    deadline = time.time() + 60
    while time.time() < deadline:
        for node in survivors:
            status = node.status(timeout=0.5)
            if (
                status
                and status.get("role") == "leader"
                and status.get("address") != old_address
                and status.get("has_quorum")
            ):
                return time.time(), status
        time.sleep(interval)
    raise SystemExit("no new leader within 60 s")


def _poll_first_commit(survivors, leader: str, interval: float) -> float | None:  # type: ignore[no-untyped-def]
    node = next(n for n in survivors if n.address == leader)
    deadline = time.time() + 30
    while time.time() < deadline:
        status = node.status(timeout=0.5)
        if status and status.get("first_commit_at"):
            return float(status["first_commit_at"])
        time.sleep(interval)
    return None


def _summary(rows) -> None:  # type: ignore[no-untyped-def]
    if not rows:
        return
    to_leader = [r[3] * 1000 for r in rows]
    to_commit = [r[4] * 1000 for r in rows if r[4] is not None]
    print(f"\n{len(rows)} kills (ms)        median      max      min    ({_load()})")
    print(
        f"  kill -> new leader  {statistics.median(to_leader):7.0f}  {max(to_leader):7.0f}"
        f"  {min(to_leader):7.0f}"
    )
    if to_commit:
        print(
            f"  kill -> 1st commit  {statistics.median(to_commit):7.0f}  {max(to_commit):7.0f}"
            f"  {min(to_commit):7.0f}"
        )


if __name__ == "__main__":
    sys.exit(main())
