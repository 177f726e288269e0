#!/usr/bin/env python
"""Log compaction under load: elections, commit stalls, schedule lag, snapshot pause and size.

For each size in ``--live-runs``, a fresh 3-node cluster (``run_retention_sec`` 7200) holds
that many live runs of 5-task DAGs in memory: backfills of DAGs that stay paused (every
backfilled run stays queued while its DAG is paused), 1,000 runs per DAG. A 1-second DAG
(catch-up on, so a late slot shows as lag) runs on a no-op worker, and a client thread makes
a cheap replicated write in a loop to time commits: SetSecret of one variable (its answer
waits for nothing but the commit), or, in a release without secrets (``--write pause``),
PauseDag/UnpauseDag of a spare DAG (where the release has read views, that answer waits for
a view at the write's index: up to the views' reuse interval, a state copy per write).
``[cluster] compaction_min_entries`` / ``compaction_min_seconds`` are set low (2,000 entries
or 20 s, whichever comes first: a loaded 2-core machine commits too few entries for the entry
threshold alone) so that every node compacts its log about three times during the measured
window of ``--window`` seconds. Then:

- elections: Raft terms begun during the window (every node's /status polled every 0.5 s);
- latency of the write loop: p50, p99 and max (the longest commit stall), end to end
  through the API; and ``raftsched_commit_latency_seconds`` (propose -> committed result of
  every command, on every node) over the window: p99 and slowest bucket;
- schedule lag of the 1-second DAG (from the DB: run ``start_date``, its first task leased,
  minus its logical date): p50/p99/max over the window, and max over the slots within 2 s
  of a compaction;
- snapshots per node: how many, the pause of the tick thread and the time to write one
  (``raftsched_snapshot_pause_seconds`` / ``_duration_seconds`` on each node's /metrics,
  read every 2 s: one count step is one snapshot, several in one read share their sum),
  and the dump file size;
- from the node logs: each election with its distance to the nearest snapshot, failed
  snapshot writes, and slow journal fsyncs (a busy disk also causes elections).

    .venv/bin/python scripts/bench/snapshot.py                        # 1k and 10k, SQLite
    .venv/bin/python scripts/bench/snapshot.py --live-runs 50000 --db postgres
    .venv/bin/python scripts/bench/snapshot.py --repeat 2 --window 60

A release without the compaction keys (they came with the forked snapshot writer) is run
with pysyncobj's defaults (5,000 entries or 300 s): raise ``--window`` (e.g. 120) or
``--writers`` so the loop writes enough entries (the bench says how many compactions it
saw). Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import shutil
import statistics
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

import sqlalchemy as sa
from api_harness import ApiCluster
from google.protobuf.timestamp_pb2 import Timestamp
from harness import Node, every_second_dag, utcnow, wait_for, whole_second

from raftsched.api.gen import dag_pb2

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CLOCK_DAG = "snap_1s"
SPARE_DAG = "snap_spare"
RUNS_PER_DAG = 1000  # BackfillDag's limit per request (api/servicers/backfill.py)
TASKS_PER_RUN = 5
BACKFILL_FROM = datetime(2020, 1, 1, tzinfo=UTC)
# The probes are light: a /metrics scrape counts the live state under the node's lock.
STATUS_EVERY = 0.5
METRICS_EVERY = 2.0
AROUND = 2.0  # seconds either side of a compaction whose slots count as "around" it
METRIC = re.compile(
    r"^raftsched_snapshot_(pause|duration)_seconds_(sum|count)(?:\{[^}]*\})?\s+(\S+)$"
)


def backfill_dag(dag_id: str) -> str:
    """A 5-task chain on a minutely schedule: 1,000 backfill slots are 1,000 minutes."""
    return textwrap.dedent(
        f"""\
        from datetime import datetime

        from raftsched import DAG, BashTask

        with DAG({dag_id!r}, schedule="* * * * *", start_date=datetime(2019, 1, 1),
                 catchup=False, max_active_runs=16) as dag:
            tasks = [BashTask(f"t{{i}}", command="true") for i in range({TASKS_PER_RUN})]
            for up, down in zip(tasks, tasks[1:]):
                up >> down
        """
    )


def spare_dag() -> str:
    return textwrap.dedent(
        f"""\
        from raftsched import DAG, BashTask

        with DAG({SPARE_DAG!r}, schedule=None) as dag:
            BashTask("noop", command="true")
        """
    )


def has_compaction_keys() -> bool:
    """Whether this release reads [cluster] compaction_min_entries (older ones refuse it)."""
    from raftsched.config import ClusterConfig

    return "compaction_min_entries" in {f.name for f in dataclasses.fields(ClusterConfig)}


def has_secrets() -> bool:
    try:
        from raftsched.api.gen import secret_pb2  # noqa: F401
    except ImportError:
        return False
    return True


# -- background probes ----------------------------------------------------------------------


@dataclass
class Probes:
    """The status, metrics and write-loop threads of one measured window."""

    nodes: list[Node]
    writers: int
    write_pause: float
    client: Any
    write: str  # "secret" (SetSecret) or "pause" (PauseDag/UnpauseDag of the spare DAG)
    stop: threading.Event = field(default_factory=threading.Event)
    terms: dict[int, list[tuple[float, int]]] = field(default_factory=dict)
    roles: dict[int, str] = field(default_factory=dict)
    # node -> [(seen at, seconds)]: each snapshot written, and each pause of the tick thread
    # (a fork; a failed write has one too). Older releases have no pause histogram.
    snapshots: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    pauses: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    forked: bool = False
    writes: list[tuple[float, float, bool]] = field(default_factory=list)  # (start, s, ok)
    errors: list[str] = field(default_factory=list)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        targets = [self._status_loop, self._metrics_loop]
        targets += [self._write_loop] * self.writers
        for i, target in enumerate(targets):
            thread = threading.Thread(target=target, args=(i,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def finish(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _status_loop(self, _: int) -> None:
        while not self.stop.wait(STATUS_EVERY):
            for node in self.nodes:
                status = node.status(timeout=2.0)
                if status is None:
                    continue
                seen = self.terms.setdefault(node.index, [])
                term = int(status.get("term") or 0)
                if not seen or seen[-1][1] != term:
                    seen.append((time.time(), term))
                self.roles[node.index] = str(status.get("role"))

    def _metrics_loop(self, _: int) -> None:
        last: dict[int, dict[str, float]] = {}
        while not self.stop.wait(METRICS_EVERY):
            for node in self.nodes:
                now = _snapshot_metrics(node)
                if now is None:
                    continue
                before = last.get(node.index)
                last[node.index] = now
                if before is None:
                    continue
                self.forked = self.forked or "pause_count" in now
                for kind, into in (("duration", self.snapshots), ("pause", self.pauses)):
                    # One count step is one observation; several in one poll share the sum.
                    steps = int(now.get(f"{kind}_count", 0) - before.get(f"{kind}_count", 0))
                    if steps > 0:
                        each = (now[f"{kind}_sum"] - before.get(f"{kind}_sum", 0)) / steps
                        into.setdefault(node.index, []).extend([(time.time(), each)] * steps)

    def _write_loop(self, worker: int) -> None:
        flip = True
        while not self.stop.is_set():
            if self.write == "secret":
                from raftsched.api.gen import secret_pb2

                call = self.client.secrets.SetSecret
                # a new value each time: setting the same one is no change (no write)
                request = secret_pb2.SetSecretRequest(
                    kind="variable", key=f"BENCH_{worker}", value="ab"[flip]
                )
            elif flip:  # the spare DAG starts paused ([scheduler] dags_are_paused_at_creation)
                call, request = self.client.dags.UnpauseDag, dag_pb2.UnpauseDagRequest()
            else:
                call, request = self.client.dags.PauseDag, dag_pb2.PauseDagRequest()
            if self.write != "secret":
                request.dag_id = SPARE_DAG
            began = time.time()
            ok = True
            try:
                call(request)
            except Exception as err:  # a commit that failed after the client's retries
                ok = False
                with self._lock:
                    self.errors.append(f"{type(err).__name__}: {err}"[:300])
            with self._lock:
                self.writes.append((began, time.time() - began, ok))
            flip = not flip
            if self.write_pause:
                self.stop.wait(self.write_pause)


BUCKET = re.compile(r'^raftsched_commit_latency_seconds_bucket\{le="([^"]+)"\}\s+(\S+)$')


def _commit_buckets(nodes: list[Node]) -> dict[float, float]:
    """``raftsched_commit_latency_seconds`` (propose -> committed result, every command
    proposed on a node) summed over the nodes: upper bound -> cumulative count."""
    out: dict[float, float] = {}
    for node in nodes:
        try:
            with urllib.request.urlopen(f"{node.admin_url}/metrics", timeout=5.0) as resp:
                text = resp.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            match = BUCKET.match(line)
            if match:
                le = float(match[1])
                out[le] = out.get(le, 0) + float(match[2])
    return out


def _bucket_summary(hist: dict[float, float]) -> str:
    """Commands, the bucket bound under which 99% fall, the largest bucket any reached."""
    bounds = sorted(hist)
    total = hist.get(math.inf, 0)
    if total <= 0:
        return "no command proposed"
    p99 = next(le for le in bounds if hist[le] >= 0.99 * total)
    slowest = next(le for le in bounds if hist[le] >= total)
    over = total - max((hist[le] for le in bounds if le <= 0.1), default=0)
    return (
        f"{total:.0f} commands, p99 <= {_bound(p99)}, slowest <= {_bound(slowest)},"
        f" {over:.0f} over 100 ms"
    )


def _bound(le: float) -> str:
    return "inf" if le == math.inf else f"{le * 1000:g} ms"


def _snapshot_metrics(node: Node) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(f"{node.admin_url}/metrics", timeout=5.0) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = METRIC.match(line)
        if match:
            out[f"{match[1]}_{match[2]}"] = float(match[3])
    return out


# -- one size -------------------------------------------------------------------------------


def bench_size(args: argparse.Namespace, live_runs: int, attempt: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"raftsched-bench-snapshot-{live_runs}-"))
    admin: sa.Engine | None = None
    dbname = ""
    if args.db == "postgres":
        admin_url = args.pg_url or os.environ.get("RAFTSCHED_TEST_PG_URL") or DEFAULT_PG
        dbname = f"raftsched_bench_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{dbname}"')
        db_url = sa.make_url(admin_url).set(database=dbname).render_as_string(hide_password=False)
    else:
        db_url = f"sqlite:///{workdir / 'raftsched.db'}"
    n_dags = math.ceil(live_runs / RUNS_PER_DAG)
    start = whole_second(utcnow()) - timedelta(seconds=2)
    dags = {f"{CLOCK_DAG}.py": every_second_dag(CLOCK_DAG, start=start, catchup=True)}
    dags[f"{SPARE_DAG}.py"] = spare_dag()
    dags.update({f"snap_bf_{i}.py": backfill_dag(f"snap_bf_{i}") for i in range(n_dags)})
    config: dict[str, dict[str, Any]] = {
        "scheduler": {
            "run_retention_sec": 7200,
            "dags_are_paused_at_creation": "true",  # the backfilled runs stay queued
        }
    }
    if args.write == "secret":
        from cryptography.fernet import Fernet

        config["secrets"] = {"fernet_key": Fernet.generate_key().decode()}
    if has_compaction_keys():
        config["cluster"] = {
            "compaction_min_entries": args.compaction_entries,
            "compaction_min_seconds": args.compaction_seconds,
        }
    try:
        with ApiCluster(workdir, db_url, dags=dags, config=config) as cluster:
            return measure(cluster, args, live_runs, n_dags, attempt)
    finally:
        if admin is not None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            admin.dispose()
        if args.keep:
            print(f"work directory kept: {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def measure(
    cluster: ApiCluster, args: argparse.Namespace, live_runs: int, n_dags: int, attempt: int
) -> dict[str, Any]:
    began_setup = time.monotonic()
    cluster.start()
    cluster.wait_leader(timeout=90)
    client = cluster.client(deadline=120.0)
    wanted = {CLOCK_DAG, SPARE_DAG} | {f"snap_bf_{i}" for i in range(n_dags)}
    cluster.wait_dags(client, wanted, timeout=180)
    created = 0
    for i in range(n_dags):
        count = min(RUNS_PER_DAG, live_runs - i * RUNS_PER_DAG)
        request = dag_pb2.BackfillDagRequest(dag_id=f"snap_bf_{i}")
        request.start_date.CopyFrom(_ts(BACKFILL_FROM))
        request.end_date.CopyFrom(_ts(BACKFILL_FROM + timedelta(minutes=count - 1)))
        created += len(client.dags.BackfillDag(request).runs)
        _drain_outbox(cluster)
    client.dags.UnpauseDag(dag_pb2.UnpauseDagRequest(dag_id=CLOCK_DAG))
    cluster.start_worker("noop", noop=True, concurrency=4)
    wait_for(lambda: _clock_runs(cluster) >= 3, timeout=120, what="runs of the 1-second DAG")
    cluster.wait_caught_up(timeout=600)
    time.sleep(args.settle)  # the catch-up of the slots missed while setting up ends here
    setup = time.monotonic() - began_setup
    print(
        f"[{live_runs} live runs, try {attempt}] {created} runs x {TASKS_PER_RUN} tasks"
        f" backfilled on {n_dags} paused DAGs; set up in {setup:.0f}s; measuring"
        f" {args.window:g}s",
        flush=True,
    )
    probes = Probes(cluster.nodes, args.writers, args.write_pause, client, args.write)
    buckets_before = _commit_buckets(cluster.nodes)
    window_start = utcnow()
    probes.start()
    time.sleep(args.window)
    probes.finish()
    window_end = utcnow()
    buckets_after = _commit_buckets(cluster.nodes)
    commit_hist = {le: buckets_after.get(le, 0) - buckets_before.get(le, 0) for le in buckets_after}
    time.sleep(3.0)  # the window's last slots: created, leased, materialized
    cluster.wait_caught_up(timeout=120)
    lags = _clock_lags(cluster, window_start, window_end)
    dumps = {
        p.parent.name: p.stat().st_size
        for p in sorted(cluster.data_dir.glob("**/*.dump"))
        if p.is_file()
    }
    return {
        "logs": _log_events(cluster, window_start.timestamp(), window_end.timestamp()),
        "commit_hist": commit_hist,
        "live_runs": live_runs,
        "created": created,
        "attempt": attempt,
        "probes": probes,
        "lags": lags,
        "dumps": dumps,
        "window": (window_start.timestamp(), window_end.timestamp()),
    }


LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ \S+ \[[^]]*\] (.*)$")
LOG_EVENTS = {
    "leader": re.compile(r"raft role candidate -> leader \(term (\d+)"),
    "snapshot": re.compile(r"snapshot written at log index (\d+)(?: in ([\d.]+)s)?"),
    "failed": re.compile(r"writing the snapshot at log index \d+ failed \((.*?)\): (.*?);"),
    "fsync": re.compile(r"fsync took (\d+) ms"),
}


def _log_events(cluster: ApiCluster, lo: float, hi: float) -> list[tuple[float, int, str, tuple]]:
    """(time, node, kind, groups) of the node log lines of LOG_EVENTS within [lo, hi]
    (the log's times are local, as ``time.time()`` is read with)."""
    out: list[tuple[float, int, str, tuple]] = []
    for node in cluster.nodes:
        try:
            lines = node.log_path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            match = LOG_LINE.match(line)
            if not match:
                continue
            at = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if not lo <= at <= hi:
                continue
            for kind, pattern in LOG_EVENTS.items():
                found = pattern.search(match[2])
                if found:
                    out.append((at, node.index, kind, found.groups()))
    return sorted(out)


def _ts(value: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(value)
    return stamp


def _drain_outbox(cluster: ApiCluster) -> None:
    """Wait until the leader's outbox is at most half full: a backfill of 1,000 runs adds
    6,000 rows, and the leader refuses proposals (back-pressure) when max_outbox is reached."""

    def low() -> bool:
        leader = cluster.leader()
        status = cluster.status(leader) if leader is not None else None
        return bool(status) and int(status.get("outbox_size") or 0) <= 20_000  # type: ignore[union-attr]

    wait_for(low, timeout=600, what="the outbox to drain", interval=0.5, describe=cluster.brief)


def _clock_runs(cluster: ApiCluster) -> int:
    return sum(1 for dag_id, _, _ in cluster.runs() if dag_id == CLOCK_DAG)


def _clock_lags(
    cluster: ApiCluster, since: datetime, until: datetime
) -> dict[datetime, float | None]:
    """Slot -> its run's start lag (first task leased minus the slot), None: not started or
    no run; for every whole second in the window."""
    from raftsched.store.tables import dag_run

    with cluster.engine.connect() as conn:
        rows = conn.execute(
            sa.select(dag_run.c.logical_date, dag_run.c.start_date).where(
                dag_run.c.dag_id == CLOCK_DAG
            )
        ).all()
    started = {_utc(r.logical_date): _utc(r.start_date) for r in rows}
    first = whole_second(since) + timedelta(seconds=1)
    out: dict[datetime, float | None] = {}
    slot = first
    while slot <= until:
        when = started.get(slot)
        out[slot] = None if when is None else (when - slot).total_seconds()
        slot += timedelta(seconds=1)
    return out


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# -- the report -----------------------------------------------------------------------------


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.0f} ms"


def report(result: dict[str, Any]) -> dict[str, Any]:
    probes: Probes = result["probes"]
    lo, hi = result["window"]
    print(f"\n== {result['live_runs']} live runs (try {result['attempt']}) ==")
    elections = 0
    for seen in probes.terms.values():
        elections = max(elections, seen[-1][1] - seen[0][1])
    terms = {i: [t for _, t in seen] for i, seen in sorted(probes.terms.items())}
    print(f"elections: {elections} (terms seen per node: {terms})")

    latencies = [s for _, s, _ in probes.writes]
    failed = sum(1 for _, _, ok in probes.writes if not ok)
    stall = max(latencies) if latencies else None
    if latencies:
        print(
            f"writes ({probes.write}, {probes.writers} writer(s)): {len(latencies)}"
            f" ({len(latencies) / (hi - lo):.0f}/s), p50 {_ms(statistics.median(latencies))},"
            f" p99 {_ms(_pct(latencies, 99))}, longest stall {_ms(stall)}"
            + (f", {failed} failed: {probes.errors[0]}" if failed else "")
        )
    else:
        print("commits: none completed")
    print(f"commit latency on the nodes (every command): {_bucket_summary(result['commit_hist'])}")

    # node -> [(start, end)] of each snapshot: seen at the metrics poll after it ended
    spans: list[tuple[float, float]] = []
    pauses: list[float] = []
    durations: list[float] = []
    for index in sorted(set(probes.snapshots) | set(probes.pauses)):
        items = probes.snapshots.get(index, [])
        stops = [p for _, p in probes.pauses.get(index, [])]
        label = "written in" if probes.forked else "written (blocking the tick thread) in"
        shown = ", ".join(_ms(d) for _, d in items)
        print(
            f"node {index}: {len(items)} snapshot(s) {label} {shown or '-'}"
            + (f"; tick thread paused {', '.join(_ms(p) for p in stops)}" if stops else "")
        )
        for seen, took in items:
            spans.append((seen - took - METRICS_EVERY, seen))
            durations.append(took)
        pauses += stops
    silent = [n.index for n in probes.nodes if n.index not in probes.snapshots]
    if silent:
        print(f"nodes without a snapshot in the window: {silent}")
    if pauses:
        print(f"snapshot pause (tick thread): max {_ms(max(pauses))}")
    if durations:
        label = "write (forked)" if probes.forked else "write (blocking, tick thread)"
        median = _ms(statistics.median(durations))
        print(f"snapshot {label}: median {median}, max {_ms(max(durations))}")
    if result["dumps"]:
        sizes = ", ".join(f"{s / 1e6:.2f} MB" for s in result["dumps"].values())
        print(f"dump files: {sizes}")
    events = result["logs"]
    # Snapshot ends from the logs (precise; the metrics poll only brackets them)
    ends = [(at, node) for at, node, kind, _ in events if kind == "snapshot"]
    for at, node, kind, groups in events:
        if kind == "leader":
            near = min(((abs(at - end), n) for end, n in ends), default=None)
            where = "" if near is None else f", {near[0]:.1f}s from node {near[1]}'s snapshot"
            print(f"election: node {node} leads term {groups[0]} at {_clock(at)}{where}")
    failed = [(at, node, groups) for at, node, kind, groups in events if kind == "failed"]
    if failed:
        per_node = {
            n: sum(1 for _, m, _ in failed if m == n) for n in sorted({f[1] for f in failed})
        }
        at, node, groups = failed[0]
        print(
            f"snapshot writes failed (retried by pysyncobj): {len(failed)} {per_node};"
            f" first on node {node} at {_clock(at)}: {groups[0]}: {groups[1]}"
        )
    fsyncs = [int(g[0]) for _, _, kind, g in events if kind == "fsync"]
    if fsyncs:
        print(f"slow journal fsyncs (>= 100 ms, logged): {len(fsyncs)}, max {max(fsyncs)} ms")

    lags: dict[datetime, float | None] = result["lags"]
    values = [v for v in lags.values() if v is not None]
    missing = sum(1 for v in lags.values() if v is None)
    around = [
        v
        for slot, v in lags.items()
        if v is not None and any(a - AROUND <= slot.timestamp() <= b + AROUND for a, b in spans)
    ]
    if values:
        print(
            f"1-second DAG start lag over {len(lags)} slots: p50 {_ms(statistics.median(values))},"
            f" p99 {_ms(_pct(values, 99))}, max {_ms(max(values))}; late (> 1 s):"
            f" {sum(1 for v in values if v > 1.0)}; not started: {missing}"
        )
    if around:
        print(
            f"  {len(around)} slots within {AROUND:g}s of a snapshot: p50"
            f" {_ms(statistics.median(around))}, max {_ms(max(around))}"
        )
    hist = result["commit_hist"]
    total = hist.get(math.inf, 0)
    slowest = next((le for le in sorted(hist) if total and hist[le] >= total), None)
    return {
        "commit_max": slowest,
        "live_runs": result["live_runs"],
        "elections": elections,
        "stall": stall,
        "p99": _pct(latencies, 99) if latencies else None,
        "lag_p99": _pct(values, 99) if values else None,
        "lag_max": max(values) if values else None,
        "snapshots": sum(len(v) for v in probes.snapshots.values()),
        # an older release's snapshot pauses the tick thread for its whole write
        "pause_max": max(pauses) if pauses else (max(durations) if durations else None),
        "write_max": max(durations) if durations else None,
        "dump": max(result["dumps"].values()) if result["dumps"] else None,
        "failed": sum(1 for e in result["logs"] if e[2] == "failed"),
    }


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S.%f")[:-3]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--live-runs", default="1000,10000", help="sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="clusters per size")
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds before the window")
    parser.add_argument("--compaction-entries", type=int, default=2000)
    parser.add_argument("--compaction-seconds", type=float, default=20.0)
    parser.add_argument(
        "--writers", type=int, default=1, help="write-loop threads (0: compaction alone)"
    )
    parser.add_argument("--write-pause", type=float, default=0.0, help="seconds between writes")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--pg-url", default="", help=f"PostgreSQL server (default {DEFAULT_PG})")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument(
        "--write",
        choices=("auto", "secret", "pause"),
        default="auto",
        help="the timed write: SetSecret (auto, where the release has it) or PauseDag/Unpause",
    )
    args = parser.parse_args()
    if args.write == "auto":
        args.write = "secret" if has_secrets() else "pause"
    sizes = [int(x) for x in args.live_runs.split(",") if x.strip()]
    keys = has_compaction_keys()
    print(
        f"3 nodes on {args.db}; timed write: {args.write}; compaction "
        + (
            f"after {args.compaction_entries} entries or {args.compaction_seconds:g}s"
            if keys
            else "at pysyncobj's defaults (this release has no compaction keys)"
        ),
        flush=True,
    )
    rows = []
    for size in sizes:
        for attempt in range(1, args.repeat + 1):
            rows.append(report(bench_size(args, size, attempt)))
    print(
        "\nlive runs  elections  API stall  API p99  commit max  lag p99  lag max  snapshots"
        "  pause max  write max  dump MB  failed"
    )
    for row in rows:
        dump = "n/a" if row["dump"] is None else f"{row['dump'] / 1e6:.2f}"
        commit = "n/a" if row["commit_max"] is None else f"<={_bound(row['commit_max'])}"
        print(
            f"{row['live_runs']:9d}  {row['elections']:9d}  {_ms(row['stall']):>9s}"
            f"  {_ms(row['p99']):>7s}  {commit:>10s}  {_ms(row['lag_p99']):>7s}"
            f"  {_ms(row['lag_max']):>7s}  {row['snapshots']:9d}  {_ms(row['pause_max']):>9s}"
            f"  {_ms(row['write_max']):>9s}  {dump:>7s}  {row['failed']:6d}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
