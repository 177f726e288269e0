#!/usr/bin/env python
"""One triggerer holding many time triggers: its memory, its CPU per trigger, how late each
fires against its due time, and whether its heartbeats stay on time meanwhile.

The triggerer (``raftsched.triggerer.loop.Triggerer``, the loop `raftsched triggerer` runs)
runs in a child process of its own against an in-memory cluster in that child
(:class:`MemoryCluster`: grants every trigger, renews every lease, records each firing and
heartbeat with its clock): so the figures are the triggerer's alone, without gRPC and Raft
commits (a firing's commit adds its FireTriggers latency, see scripts/bench/latency.py).

``--triggers`` (10,000) time triggers, due evenly over ``--spread`` seconds starting
``--lead`` seconds after the start (time to lease them all). The parent samples the child's
RSS and CPU (utime+stime, /proc) every 0.2 s. Printed:

- RSS: before leasing, the peak while holding them all, and (peak - before) per trigger;
- CPU seconds per trigger: the child's CPU from its start to the last firing, over N;
- firing lag (the firing's report time - its due time): p50, p99, max;
- heartbeats while holding: how many, the gaps between them (p50, max) against
  ``--heartbeat-interval``, how many came later than interval + 1 s, and the largest batch.

    .venv/bin/python scripts/bench/events.py                       # 10,000 triggers
    .venv/bin/python scripts/bench/events.py --triggers 2000 --spread 10

Bounded: the child stops at ``--lead + --spread + 60`` s whatever happened; the parent waits
for it at most 30 s more, then kills it. No asserts: prints figures (timings on a loaded
machine say little; run it on a quiet one).

Asset event -> consumer task start, on a real cluster, is ``scripts/bench/asset_latency.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from raftsched.core.model import TaskKey
from raftsched.triggerer.loop import Triggerer, TriggererSettings
from raftsched.triggerer.transport import Firing, TriggerGrant

MAX_GRANTS_PER_CALL = 1_000  # as WorkerService.LeaseTriggers
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class MemoryCluster:
    """The cluster side of the triggerer's three calls, in memory, with timestamps."""

    def __init__(self, grants: list[TriggerGrant]) -> None:
        self.pending = list(grants)
        self.lock = threading.Lock()
        self.fired: list[tuple[float, str]] = []  # (wall time reported, event)
        self.beats: list[tuple[float, int]] = []  # (monotonic, refs)
        self.leased_all_at: float | None = None

    def lease(self, most: int, wait: float) -> list[TriggerGrant]:
        with self.lock:
            n = min(most, MAX_GRANTS_PER_CALL)
            out, self.pending = self.pending[:n], self.pending[n:]
            if not self.pending and self.leased_all_at is None and out:
                self.leased_all_at = time.monotonic()
        if not out:
            time.sleep(min(wait, 0.5))
        return out

    def heartbeat(self, refs: list[tuple[TaskKey, int]]) -> list[bool]:
        with self.lock:
            self.beats.append((time.monotonic(), len(refs)))
        return [True] * len(refs)

    def fire(self, firings: list[Firing]) -> list[str]:
        now = time.time()
        with self.lock:
            self.fired.extend((now, f.event_json) for f in firings)
        return [""] * len(firings)


def child(args: argparse.Namespace, out: Any) -> None:
    start = datetime.now(UTC) + timedelta(seconds=args.lead)
    step = args.spread / max(1, args.triggers)
    grants = [
        TriggerGrant(
            TaskKey("bench_events", "r1", f"t{i:05d}"),
            i + 1,
            1,
            "time",
            json.dumps({"moment": (start + timedelta(seconds=i * step)).isoformat()}),
            "/dags/bench.py",
        )
        for i in range(args.triggers)
    ]
    cluster = MemoryCluster(grants)
    del grants
    settings = TriggererSettings(
        capacity=args.triggers,
        lease_ttl=args.lease_ttl,
        heartbeat_interval=args.heartbeat_interval,
        poll_wait=1.0,
    )
    triggerer = Triggerer(cluster, settings)
    thread = threading.Thread(target=triggerer.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + args.lead + args.spread + 60
    while time.monotonic() < deadline and len(cluster.fired) < args.triggers:
        time.sleep(0.2)
    last_fire = time.monotonic()
    triggerer.stop()
    thread.join(10)
    with cluster.lock:
        out.send(
            {
                "fired": cluster.fired,
                "beats": cluster.beats,
                "leased_all_at": cluster.leased_all_at,
                "last_fire": last_fire,
                "errors": triggerer.counters.errors,
            }
        )
    out.close()


def proc_sample(pid: int) -> tuple[int, float] | None:
    """(RSS bytes, CPU seconds) of ``pid``, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        statm = Path(f"/proc/{pid}/statm").read_text().split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(statm[1]) * PAGE, (int(fields[11]) + int(fields[12])) / TICKS


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triggers", type=int, default=10_000)
    parser.add_argument("--lead", type=float, default=15.0, help="seconds before the first due")
    parser.add_argument("--spread", type=float, default=30.0, help="seconds the dues span")
    parser.add_argument("--heartbeat-interval", type=float, default=2.0)
    parser.add_argument("--lease-ttl", type=float, default=10.0)
    args = parser.parse_args()
    if not 1 <= args.triggers <= 100_000:
        parser.error("--triggers must be within 1..100000 (a triggerer's capacity)")

    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child, args=(args, send), daemon=True)
    proc.start()
    send.close()
    started = time.monotonic()
    first = None
    samples: list[tuple[float, int, float]] = []  # (monotonic, rss, cpu)
    result: dict[str, Any] | None = None
    limit = started + args.lead + args.spread + 90
    while time.monotonic() < limit:
        sample = proc_sample(proc.pid)  # type: ignore[arg-type]
        if sample is not None:
            samples.append((time.monotonic(), *sample))
            first = first or sample
        if receive.poll(0.2):
            try:
                result = receive.recv()
            except EOFError:
                result = None
            break
        if not proc.is_alive():
            break
    proc.join(30)
    if proc.is_alive():
        proc.kill()
        proc.join(5)
    if result is None or not samples or first is None:
        print("the triggerer child gave no result (killed or crashed)")
        return 1

    n, fired = args.triggers, result["fired"]
    lags = []
    for reported, event in fired:
        due = datetime.fromisoformat(json.loads(event)).timestamp()
        lags.append(reported - due)
    holding = [s for s in samples if result["leased_all_at"] and s[0] >= result["leased_all_at"]]
    peak = max(rss for _, rss, _ in holding or samples)
    cpu = max(c for _, _, c in samples)
    beats: list[float] = []  # each renewal round's start (a round may take several batches)
    for t, refs in result["beats"]:
        if refs > 0 and (not beats or t - beats[-1] > args.heartbeat_interval / 2):
            beats.append(t)
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    late = [g for g in gaps if g > args.heartbeat_interval + 1.0]
    biggest = max((refs for _, refs in result["beats"]), default=0)

    print(f"triggers: {n}, fired {len(fired)}, trigger errors {result['errors']}")
    print(
        f"RSS: {first[0] / 2**20:.1f} MiB at start, peak {peak / 2**20:.1f} MiB holding them,"
        f" {(peak - first[0]) / n / 1024:.2f} KiB per trigger"
    )
    print(f"CPU: {cpu:.2f} s in all, {cpu / n * 1000:.3f} ms per trigger")
    if lags:
        print(
            f"firing lag after the due time: p50 {pct(lags, 0.5) * 1000:.0f} ms,"
            f" p99 {pct(lags, 0.99) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms"
        )
    if gaps:
        print(
            f"heartbeats: {len(beats)} (interval {args.heartbeat_interval:g} s), gap p50"
            f" {statistics.median(gaps):.2f} s, max {max(gaps):.2f} s, {len(late)} later than"
            f" interval + 1 s, largest batch {biggest} triggers"
            f" ({'within' if max(gaps) < args.lease_ttl else 'PAST'} the {args.lease_ttl:g} s TTL)"
        )
    return 0 if len(fired) == n else 2


if __name__ == "__main__":
    sys.exit(main())
