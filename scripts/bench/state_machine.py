"""Benchmark the replicated state machine (prints figures; asserts nothing).

    .venv/bin/python scripts/bench/state_machine.py            # defaults: < 2 minutes
    .venv/bin/python scripts/bench/state_machine.py --scale 4  # bigger states
    .venv/bin/python scripts/bench/state_machine.py --due-dags 10000,100000,1000000
    .venv/bin/python scripts/bench/state_machine.py --state 100000:10000  # restore, memory

Sections: apply throughput (CreateRuns unbatched and batched), lease/complete cycles,
snapshot/restore/digest cost at a realistic state size, and the leader's due-work cost with
``raftsched.core.due.DueIndex`` over many registered DAGs.

``--state DAGS:RUNS`` measures one node's figures at that size, each in a process of its own
(a node holds one state): a child builds the state through apply (as a node replaying the
log) and prints its resident memory, then writes the snapshot file as a node does (gzipped
pickle); a second child reads that file and restores it (as a node starting from it, or a
follower receiving it) and prints the time and its resident memory (peak: the decoded
snapshot and the state at once; after: the state alone).
"""

from __future__ import annotations

import argparse
import functools
import gc
import gzip
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from raftsched.core import commands as c
from raftsched.core.model import DagSpec, Schedule, ScheduleKind, TaskSpec
from raftsched.core.state import SchedulerState
from raftsched.raft.snapshots import read_snapshot_file

T0 = datetime(2024, 1, 1, tzinfo=UTC)


class Log:
    """Feeds commands to a state at increasing log indexes."""

    def __init__(self, state: SchedulerState | None = None) -> None:
        self.state = state or SchedulerState()
        self.index = self.state.applied_index
        self.n = 0

    def rid(self) -> str:
        self.n += 1
        return f"bench-{self.n}"

    def apply(self, command: c.Command) -> Any:
        self.index += 1
        return self.state.apply(command, log_index=self.index)


def make_spec(i: int, tasks: int) -> DagSpec:
    specs = [TaskSpec(task_id="t0", kind="bash", command="true")]
    specs += [
        TaskSpec(task_id=f"t{j}", kind="bash", command="true", upstream=(f"t{j - 1}",))
        for j in range(1, tasks)
    ]
    return DagSpec(
        dag_id=f"dag_{i:06}",
        fileloc=f"/dags/dag_{i:06}.py",
        schedule=Schedule(ScheduleKind.CRON, cron="*/5 * * * *", display="*/5 * * * *"),
        start_date=T0 - timedelta(days=1),
        max_active_runs=1_000_000,
        max_active_tasks=1_000_000,
        tasks=tuple(sorted(specs, key=lambda t: t.task_id)),
    )


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def rss_mib() -> tuple[float, float]:
    """This process's resident memory now and at its peak (MiB; Linux /proc)."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0]) / 1024
    return found.get("VmRSS", 0.0), found.get("VmHWM", peak_rss_mib())


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def decision(dag_id: str, k: int) -> c.RunDecision:
    logical = T0 + timedelta(minutes=5 * k)
    return c.RunDecision(dag_id, logical, logical - timedelta(minutes=5), logical)


def registered(dags: int, tasks: int) -> Log:
    log = Log()
    specs = tuple(make_spec(i, tasks) for i in range(dags))
    for start in range(0, dags, 500):
        log.apply(c.RegisterDags(request_id=log.rid(), now=T0, specs=specs[start : start + 500]))
    return log


def bench_create(dags: int, runs: int, tasks: int, batch: int) -> None:
    log = registered(dags, tasks)
    decisions = [decision(f"dag_{k % dags:06}", k // dags) for k in range(runs)]
    commands = [
        c.CreateRuns(request_id=log.rid(), now=T0, runs=tuple(decisions[i : i + batch]))
        for i in range(0, runs, batch)
    ]
    seconds, results = timed(lambda: [log.apply(cmd) for cmd in commands])
    assert all(res.ok for res in results), results[0]
    print(
        f"  CreateRuns x{batch:<4} per command: {len(commands) / seconds:9,.0f} commands/s "
        f"{runs / seconds:9,.0f} runs/s  ({runs * tasks / seconds:,.0f} task instances/s, "
        f"{tasks} tasks/run)"
    )


def bench_lease_cycle(runs: int, tasks: int, per_lease: int) -> None:
    log = registered(50, tasks)
    batch = tuple(decision(f"dag_{k % 50:06}", k // 50) for k in range(runs))
    log.apply(c.CreateRuns(request_id=log.rid(), now=T0, runs=batch))
    cycles = 0

    def loop() -> int:
        nonlocal cycles
        while True:
            grants = log.apply(
                c.LeaseTasks(request_id=log.rid(), now=T0, worker_id="w", max_tasks=per_lease)
            ).value
            if not grants:
                return cycles
            for grant in grants:
                log.apply(
                    c.CompleteAttempt(
                        request_id=log.rid(),
                        now=T0,
                        key=grant.lease.key,
                        token=grant.lease.token,
                        success=True,
                    )
                )
                cycles += 1

    seconds, done = timed(loop)
    commands = done + done / per_lease
    print(
        f"  lease {per_lease:>3}/command + complete: {done / seconds:9,.0f} attempts/s "
        f"({commands / seconds:,.0f} commands/s; {done} attempts, runs finish as they go)"
    )


def build_state(dags: int, runs: int, tasks: int) -> SchedulerState:
    log = registered(dags, tasks)
    for start in range(0, runs, 500):
        batch = tuple(decision(f"dag_{k % dags:06}", k // dags) for k in range(start, start + 500))
        log.apply(c.CreateRuns(request_id=log.rid(), now=T0, runs=batch))
    # some running attempts and some acked history, as in a busy cluster
    for start in range(0, runs // 4, 1000):  # at most 1000 leases per command (core.limits)
        take = min(1000, runs // 4 - start)
        log.apply(c.LeaseTasks(request_id=log.rid(), now=T0, worker_id="w", max_tasks=take))
    return log.state


def describe(state: SchedulerState, runs: int, tasks: int) -> str:
    return (
        f"{len(state.dags):,} DAGs, {state.run_count:,} runs, {runs * tasks:,} task instances,"
        f" {len(state.leases()):,} leases, {state.outbox_size:,} outbox entries"
    )


def bench_snapshot(dags: int, runs: int, tasks: int) -> None:
    state = build_state(dags, runs, tasks)
    print(f"  state: {describe(state, runs, tasks)}")
    seconds, snap = timed(state.snapshot)
    print(f"  snapshot()           {seconds * 1000:9.1f} ms")
    seconds, text = timed(lambda: json.dumps(snap))
    print(f"  json.dumps(snapshot) {seconds * 1000:9.1f} ms  ({len(text) / 1e6:.1f} MB)")
    seconds, blob = timed(lambda: pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    print(f"  pickle.dumps(state)  {seconds * 1000:9.1f} ms  ({len(blob) / 1e6:.1f} MB)")
    seconds, restored = timed(lambda: SchedulerState.restore(snap))
    print(f"  restore(snapshot)    {seconds * 1000:9.1f} ms")
    seconds, _ = timed(lambda: [state.digest() for _ in range(1000)])
    seconds /= 1000
    print(f"  digest()             {seconds * 1000:9.4f} ms per call (incremental; 1000 calls)")
    seconds, full = timed(state.recompute_digest)
    equal = full == state.digest() == restored.digest()
    print(f"  recompute_digest()   {seconds * 1000:9.1f} ms  (from scratch; equal: {equal})")
    seconds, _ = timed(lambda: state.outbox_after(state.outbox_acked_seq, 1000))
    print(f"  outbox_after(1000)   {seconds * 1000:9.3f} ms")


def bench_due(counts: list[int]) -> None:
    try:
        from raftsched.core.due import DueIndex
    except ImportError as err:  # written concurrently; the lead runs this at the end
        print(f"  raftsched.core.due not importable yet ({err}); skipped")
        return
    for count in counts:
        bench_due_one(DueIndex(), count)


def bench_due_one(index: Any, count: int) -> None:
    specs = [make_spec(i, 1) for i in range(count)]
    # last runs spread over the last 5 minutes: about 1/300 of the DAGs come due per second
    lasts = [T0 - timedelta(seconds=(i * 7) % 300) for i in range(count)]

    def build() -> None:
        for spec, last in zip(specs, lasts, strict=True):
            index.upsert(spec, last_logical_date=last, paused=False)

    def tick(now: datetime, limit: int) -> list[c.RunDecision]:
        due = index.collect(now, capacity=lambda _: 16, limit=limit)
        return due

    seconds, _ = timed(build)
    print(f"  {count:>9,} DAGs: build {seconds:6.2f} s", end="")
    seconds, first = timed(lambda: tick(T0, 1000))
    print(f" | first tick {seconds * 1000:7.1f} ms ({len(first)} due)", end="")
    for d in first:
        index.mark_created(d.dag_id, d.logical_date)
    ticks, total, spent = 0, 0, 0.0
    for step in range(1, 11):
        now = T0 + timedelta(seconds=step * 10)
        seconds, due = timed(lambda now=now: tick(now, 5000))
        spent += seconds
        total += len(due)
        ticks += 1
        for d in due:
            index.mark_created(d.dag_id, d.logical_date)
    print(
        f" | 10 s ticks: {spent / ticks * 1000:8.2f} ms/tick,"
        f" {total / ticks:8,.0f} runs due/tick, {spent / max(total, 1) * 1e6:6.1f} us/run"
    )


def timed_both(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process, value): CPU time says more than wall time
    on a machine that other work shares."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, value


def node_build(dags: int, runs: int, tasks: int, path: str) -> None:
    """Child 1: a node that applied the log to this size; writes the snapshot file."""
    state = build_state(dags, runs, tasks)
    gc.collect()
    now, _ = rss_mib()
    print(f"  state: {describe(state, runs, tasks)}")
    print(f"  node that applied the log: resident {now:7.0f} MiB (the state alone)")
    wall, cpu, snap = timed_both(state.snapshot)
    print(f"  snapshot()                {wall:7.2f} s   (CPU {cpu:6.2f} s)")
    payload = {"format": 1, "raft": (), "state": snap, "digest": state.digest()}

    def write() -> int:
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3) as out:
            pickle.dump(payload, out, protocol=pickle.HIGHEST_PROTOCOL)
        return os.path.getsize(path)

    wall, cpu, size = timed_both(write)
    print(f"  pickle+gzip to file       {wall:7.2f} s   (CPU {cpu:6.2f} s; {size / 1e6:.1f} MB)")
    wall, cpu, full = timed_both(state.recompute_digest)
    print(
        f"  recompute_digest()        {wall:7.2f} s   (CPU {cpu:6.2f} s; from scratch;"
        f" equal: {full == state.digest()})"
    )


def node_restore(path: str) -> None:
    """Child 2: a node starting from the snapshot file (or receiving it from the leader)."""

    # as a node reads it (raftsched.raft.engine: read_snapshot_file, then restore)
    wall, cpu, payload = timed_both(functools.partial(read_snapshot_file, path))
    print(f"  read+unpickle the file    {wall:7.2f} s   (CPU {cpu:6.2f} s)")
    snap, expected = payload["state"], payload["digest"]
    del payload
    wall2, cpu2, state = timed_both(functools.partial(SchedulerState.restore, snap))
    agrees = state.digest() == expected
    print(
        f"  restore(snapshot)         {wall2:7.2f} s   (CPU {cpu2:6.2f} s; digest equals the"
        f" original's: {agrees})"
    )
    print(
        f"  file to state, in all     {wall + wall2:7.2f} s   (CPU {cpu + cpu2:6.2f} s;"
        " the restore goal: at most 5 s)"
    )
    _, peak = rss_mib()
    del snap
    gc.collect()
    now, _ = rss_mib()
    print(
        f"  node restored from it:    resident {now:7.0f} MiB after, {peak:7.0f} MiB peak"
        " (the decoded snapshot and the state at once)"
    )
    wall, cpu, full = timed_both(state.recompute_digest)
    print(
        f"  recompute_digest()        {wall:7.2f} s   (CPU {cpu:6.2f} s; equal: "
        f"{full == state.digest()})"
    )


def per_node(dags: int, runs: int, tasks: int) -> None:
    """``--state``: each node's figures in a process of its own (see the module doc)."""
    print(
        f"one node at {dags:,} DAGs and {runs:,} live runs ({tasks} tasks per DAG)"
        f" - load average {os.getloadavg()[0]:.1f} (other work shares the machine):"
    )
    me = [sys.executable, os.path.abspath(__file__)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "raft.dump")
        steps = (["--child-build", f"{dags}:{runs}", "--tasks", str(tasks)], ["--child-restore"])
        for step in steps:
            sys.stdout.flush()
            subprocess.run([*me, *step, "--file", path], check=True)
    print(f"  load average at the end: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply state sizes")
    parser.add_argument("--tasks", type=int, default=5, help="tasks per DAG (a chain)")
    parser.add_argument("--due-dags", default="10000,100000", help="comma-separated DAG counts")
    parser.add_argument(
        "--state",
        default="",
        metavar="DAGS:RUNS",
        help="only the snapshot/restore/memory figures of one state size (e.g. 100000:10000)",
    )
    parser.add_argument("--child-build", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child-restore", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--file", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_build:
        dags, runs = (int(x) for x in args.child_build.split(":"))
        node_build(dags, runs, args.tasks, args.file)
        return
    if args.child_restore:
        node_restore(args.file)
        return
    if args.state:
        dags, runs = (int(x) for x in args.state.split(":"))
        per_node(dags, runs, args.tasks)
        return
    scale, tasks = args.scale, args.tasks

    print(f"apply throughput ({tasks} tasks per DAG):")
    bench_create(dags=1000, runs=int(4000 * scale), tasks=tasks, batch=1)
    bench_create(dags=1000, runs=int(10000 * scale), tasks=tasks, batch=500)
    print("lease/complete cycles:")
    bench_lease_cycle(runs=int(1000 * scale), tasks=tasks, per_lease=1)
    bench_lease_cycle(runs=int(1000 * scale), tasks=tasks, per_lease=50)
    print("snapshot and digest:")
    bench_snapshot(dags=int(2000 * scale), runs=int(10000 * scale), tasks=tasks)
    print("due work (DueIndex.collect):")
    bench_due([int(x) for x in args.due_dags.split(",") if x])


if __name__ == "__main__":
    main()
