#!/usr/bin/env python
"""Task execution cost: 3 scheduler nodes on PostgreSQL, one real worker, figures from the DB.

Phases (each a manual trigger of its own DAG; times read from ``dag_run``/``task_instance``):

i. (only when asked: ``--phases iabcd``) ``--idle`` seconds of nothing with the worker attached:
   the CPU the cluster burns per second whatever it runs.

a. ``--tasks`` independent ``BashTask("true")``: trigger -> run success.
b. ``--tasks`` independent no-op ``PythonTask``: trigger -> run success.
c. ``--chains`` chains x ``--steps`` dependent ``true`` steps: median time per dependent step
   (a step's end -> the next step's end) and median gap (a step's end -> the next's start).
d. The chains again (``--kill-steps`` steps each); once a third has run, kill -9 the worker and
   start another: time from the kill until a step that started after it succeeds, for the
   first chain and for every chain (the one whose step the dead worker held waits for its
   lease to expire); then checks that no task has two attempts overlapping in time and that
   none succeeded twice.
e. Empty tasks (``EmptyTask``, Airflow's ``EmptyOperator``): ``--empty`` empty branches joined
   by one ``BashTask("true")``, then ``--empty`` bash branches joined by one empty task: the
   attempts leased to a worker (each is a lease and a task process) against the tasks that
   finished, and the scheduler nodes' CPU (the empty ones are finished by the scheduler).
m. Dynamic task mapping: a ``@task`` returns ``--map`` commands (``true``) and a
   ``BashTask.partial(...).expand(command=...)`` maps over them (one task instance each):
   trigger -> run success, and the list's commit -> the last instance's end; then checks that
   every instance succeeded once, on its first try.

CPU seconds per process kind for each phase, from /proc (utime+stime, plus the reaped
children's cutime+cstime): the scheduler nodes (their DAG-parse children included), the worker
process, the task children (every live descendant of the worker and what the worker reaped),
and PostgreSQL (the whole server: the postmaster and its backends, other users' included).

    .venv/bin/python scripts/bench/tasks.py                      # 1000 tasks, 4 x 250 chains
    .venv/bin/python scripts/bench/tasks.py --phases m --map 1000  # the mapping phase alone
    .venv/bin/python scripts/bench/tasks.py --phases e --empty 1000  # empty tasks alone
    .venv/bin/python scripts/bench/tasks.py --tasks 200 --steps 50 --kill-steps 30

A database of its own on $RAFTSCHED_TEST_PG_URL's server (default 127.0.0.1:5432/test),
created and dropped. One worker, ``--slots`` (32) slots. No asserts: prints figures.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

from api_harness import ApiCluster
from harness import wait_for

from raftsched.api.gen import dag_pb2

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TICK = os.sysconf("SC_CLK_TCK")


def dag_files(args: argparse.Namespace) -> dict[str, str]:
    head = "from datetime import datetime\nfrom raftsched import DAG, BashTask, PythonTask\n\n"
    common = "schedule=None, start_date=datetime(2024, 1, 1), max_active_tasks=100000"
    bash = head + textwrap.dedent(
        f"""\
        with DAG("b_bash", {common}) as dag:
            for i in range({args.tasks}):
                BashTask(f"t{{i}}", command="true")
        """
    )
    python = head + textwrap.dedent(
        f"""\
        def noop():
            pass

        with DAG("b_python", {common}) as dag:
            for i in range({args.tasks}):
                PythonTask(f"t{{i}}", fn=noop)
        """
    )

    def chains(dag_id: str, steps: int) -> str:
        return head + textwrap.dedent(
            f"""\
            from datetime import timedelta

            with DAG({dag_id!r}, {common}) as dag:
                for c in range({args.chains}):
                    prev = None
                    for s in range({steps}):
                        t = BashTask(f"c{{c}}_s{{s:04d}}", command="true", retries=3,
                                     retry_delay=timedelta(seconds=0.5))
                        if prev is not None:
                            prev >> t
                        prev = t
            """
        )

    mapped = head + textwrap.dedent(
        f"""\
        from raftsched import task

        with DAG("b_map", {common}, max_map_length={min(max(args.map, 1), 10_000)}) as dag:
            @task
            def commands():
                return ["true"] * {args.map}

            BashTask.partial(task_id="m").expand(command=commands())
        """
    )
    empty_head = head.replace("BashTask,", "BashTask, EmptyTask,")
    empty_fan = empty_head + textwrap.dedent(
        f"""\
        with DAG("b_empty_fan", {common}) as dag:
            [EmptyTask(f"e{{i}}") for i in range({args.empty})] >> BashTask("join", command="true")
        """
    )
    empty_join = empty_head + textwrap.dedent(
        f"""\
        with DAG("b_empty_join", {common}) as dag:
            [BashTask(f"t{{i}}", command="true") for i in range({args.empty})] >> EmptyTask("join")
        """
    )
    return {
        "b_empty_fan.py": empty_fan,
        "b_empty_join.py": empty_join,
        "b_map.py": mapped,
        "b_bash.py": bash,
        "b_python.py": python,
        "b_chains.py": chains("b_chains", args.steps),
        "b_kill.py": chains("b_kill", args.kill_steps),
    }


# -- CPU from /proc -------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(ppid, own cpu s, reaped children's cpu s)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    own = (int(fields[11]) + int(fields[12])) / TICK
    reaped = (int(fields[13]) + int(fields[14])) / TICK
    return int(fields[1]), own, reaped


def _all_stats() -> dict[int, tuple[int, float, float]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (s := _stat(int(name))) is not None:
            out[int(name)] = s
    return out


class CpuMeter:
    def __init__(self, cluster: ApiCluster, pg: sa.Engine, db_name: str) -> None:
        self.cluster, self.pg, self.db_name = cluster, pg, db_name
        self.gone: dict[str, float] = defaultdict(float)  # cpu of workers killed meanwhile
        self.last: dict[str, float] = {}

    def _pg_pids(self) -> list[int]:
        """The postmaster: its backends are its children (it reaps the ones that exit)."""
        found = []
        for name in os.listdir("/proc"):
            try:
                with open(f"/proc/{name}/stat") as f:
                    comm, rest = f.read().split(") ", 1)
                parent = int(rest.split()[1])
                with open(f"/proc/{parent}/comm") as f:
                    parent_comm = f.read().strip()
            except (OSError, ValueError, IndexError):
                continue
            if comm.endswith("(postgres") and parent_comm != "postgres":
                found.append(int(name))
        return found

    def sample(self) -> dict[str, float]:
        stats = _all_stats()
        kids: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _, _) in stats.items():
            kids[ppid].append(pid)

        def tree(pid: int) -> float:  # live descendants, each with what it reaped
            total, todo = 0.0, list(kids.get(pid, []))
            while todo:
                p = todo.pop()
                total += stats[p][1] + stats[p][2]
                todo.extend(kids.get(p, []))
            return total

        out = {"schedulers": 0.0, "worker": 0.0, "task children": 0.0, "postgresql": 0.0}
        for node in self.cluster.nodes:
            if node.pid is not None and node.pid in stats:
                out["schedulers"] += stats[node.pid][1] + stats[node.pid][2]
        for w in self.cluster.workers.values():
            if w.pid is not None and w.pid in stats:
                out["worker"] += stats[w.pid][1]
                out["task children"] += stats[w.pid][2] + tree(w.pid)
        for pid in self._pg_pids():  # the whole server: other users of it count too
            if pid in stats:
                out["postgresql"] += stats[pid][1] + stats[pid][2] + tree(pid)
        for k, v in self.gone.items():
            out[k] += v
        self.last = out
        return out


def delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: max(0.0, b[k] - a.get(k, 0.0)) for k in b}


# -- phases ---------------------------------------------------------------------------------


def trigger(client: Any, dag_id: str) -> str:
    return client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id=dag_id)).run.run_id


def run_row(engine: sa.Engine, dag_id: str, run_id: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT state, created_at, start_date, end_date FROM dag_run"
                " WHERE dag_id = :d AND run_id = :r"
            ),
            {"d": dag_id, "r": run_id},
        ).first()


def attempts(engine: sa.Engine, dag_id: str, run_id: str) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT task_id, try_number, state, start_date, end_date, worker_id"
                    " FROM task_instance WHERE dag_id = :d AND run_id = :r"
                ),
                {"d": dag_id, "r": run_id},
            )
        )


def wait_done(engine: sa.Engine, dag_id: str, run_id: str, limit: float) -> Any:
    def probe() -> Any:
        row = run_row(engine, dag_id, run_id)
        return row if row is not None and row.state in ("success", "failed") else None

    try:
        return wait_for(probe, timeout=limit, what=f"run {dag_id}", interval=0.25)
    except AssertionError:
        return None


def log_index(cluster: ApiCluster) -> int:
    """The highest commit index any node reports: Raft entries so far."""
    found = [int(s.get("commit_index") or 0) for s in cluster.statuses().values() if s]
    return max(found, default=0)


def phase_run(
    cluster: ApiCluster, client: Any, meter: CpuMeter, dag_id: str, limit: float
) -> tuple[str, Any, dict[str, float]]:
    before, index = meter.sample(), log_index(cluster)
    run_id = trigger(client, dag_id)
    row = wait_done(cluster.engine, dag_id, run_id, limit)
    cpu = delta(before, meter.sample())
    cpu["raft entries"] = float(log_index(cluster) - index)
    return run_id, row, cpu


def print_cpu(cpu: dict[str, float], tasks: int) -> None:
    entries = cpu.pop("raft entries", None)
    parts = [f"{k} {v:.1f}" for k, v in cpu.items()]
    print(f"    cpu s: {', '.join(parts)}")
    print(
        f"    per task: scheduler nodes {cpu['schedulers'] / max(tasks, 1) * 1000:.1f} ms CPU,"
        f" task children {cpu['task children'] / max(tasks, 1) * 1000:.1f} ms CPU"
        + (f", {entries / max(tasks, 1):.2f} Raft entries" if entries is not None else "")
    )


def flat(cluster: ApiCluster, client: Any, meter: CpuMeter, dag_id: str, args: Any) -> None:
    run_id, row, cpu = phase_run(cluster, client, meter, dag_id, args.limit)
    rows = attempts(cluster.engine, dag_id, run_id)
    ok = sum(1 for r in rows if r.state == "success")
    if row is None or row.end_date is None:
        print(f"  {dag_id}: not finished within {args.limit:.0f}s ({ok} tasks succeeded)")
    else:
        took = (row.end_date - row.created_at).total_seconds()
        print(
            f"  {dag_id}: {args.tasks} tasks, trigger -> run {row.state} {took:.1f}s"
            f" ({ok / max(took, 1e-6):.0f} tasks/s)"
        )
    entries = lease_entries(cluster.engine, dag_id, run_id)
    print(f"    LeaseTasks entries that granted: {entries} ({ok / max(entries, 1):.1f} tasks each)")
    print_cpu(cpu, args.tasks)


def lease_entries(engine: sa.Engine, dag_id: str, run_id: str) -> int:
    """Distinct fencing tokens: each is the log index of the LeaseTasks entry that granted."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT COUNT(DISTINCT lease_token) FROM task_instance"
                    " WHERE dag_id = :d AND run_id = :r"
                ),
                {"d": dag_id, "r": run_id},
            ).scalar()
            or 0
        )


def chain_steps(rows: list[Any]) -> tuple[list[float], list[float]]:
    by_chain: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        if r.state == "success" and r.end_date is not None:
            by_chain[r.task_id.split("_")[0]].append(r)
    steps, gaps = [], []
    for chain in by_chain.values():
        chain.sort(key=lambda r: r.task_id)
        for a, b in itertools.pairwise(chain):
            steps.append((b.end_date - a.end_date).total_seconds())
            if b.start_date is not None:
                gaps.append((b.start_date - a.end_date).total_seconds())
    return steps, gaps


def chains(cluster: ApiCluster, client: Any, meter: CpuMeter, args: Any) -> None:
    run_id, row, cpu = phase_run(cluster, client, meter, "b_chains", args.limit)
    steps, gaps = chain_steps(attempts(cluster.engine, "b_chains", run_id))
    state = "not finished" if row is None else row.state
    print(f"  b_chains: {args.chains} x {args.steps} steps, run {state}")
    if steps:
        print(
            f"    per dependent step: median {statistics.median(steps) * 1000:.0f} ms"
            f" (p90 {sorted(steps)[int(0.9 * len(steps))] * 1000:.0f} ms);"
            f" end -> next start median {statistics.median(gaps) * 1000:.0f} ms"
        )
    print_cpu(cpu, args.chains * args.steps)


def idle(meter: CpuMeter, seconds: float) -> None:
    """What the cluster, a worker attached and polling, burns doing nothing: the floor under
    every per-task figure (it is paid per second, however few tasks run)."""
    before = meter.sample()
    time.sleep(seconds)
    cpu = delta(before, meter.sample())
    print(f"  idle {seconds:g} s, one worker attached")
    print(
        "    cpu s per second: "
        + ", ".join(f"{k} {v / seconds:.3f}" for k, v in cpu.items() if k != "task children")
    )


def kill_phase(cluster: ApiCluster, client: Any, meter: CpuMeter, args: Any) -> None:
    dag_id = "b_kill"
    before = meter.sample()
    run_id = trigger(client, dag_id)
    third = args.chains * args.kill_steps // 3

    index = log_index(cluster)

    def progressed() -> bool:
        rows = attempts(cluster.engine, dag_id, run_id)
        return sum(1 for r in rows if r.state == "success") >= third

    wait_for(progressed, timeout=args.limit, what="a third of the chains", interval=0.1)
    old = cluster.workers["w1"]
    gone = meter.sample()
    descendants = _descendants(old.pid) if old.pid is not None else []
    old.kill()
    killed_at_wall = time.time()
    meter.gone["worker"] += gone["worker"]
    meter.gone["task children"] += gone["task children"]
    cluster.start_worker("w2", concurrency=args.slots)
    orphans_by = time.monotonic() + 10
    while any(_alive(p) for p in descendants) and time.monotonic() < orphans_by:
        time.sleep(0.05)
    orphans = [p for p in descendants if _alive(p)]
    row = wait_done(cluster.engine, dag_id, run_id, args.limit)
    cpu = delta(before, meter.sample())
    cpu["raft entries"] = float(log_index(cluster) - index)
    rows = attempts(cluster.engine, dag_id, run_id)
    killed_at = _as_db_time(rows, killed_at_wall)
    first: dict[str, Any] = {}  # chain -> its first step that succeeded, started after the kill
    for r in rows:
        if r.state == "success" and r.start_date is not None and r.start_date > killed_at:
            chain = r.task_id.split("_")[0]
            if chain not in first or r.end_date < first[chain]:
                first[chain] = r.end_date
    state = "not finished" if row is None else row.state
    print(f"  b_kill: {args.chains} x {args.kill_steps} steps, worker kill -9'd, run {state}")
    if first:
        flows = sorted((t - killed_at).total_seconds() for t in first.values())
        print(
            f"    kill -> a chain flows again: {flows[0]:.1f}s;"
            f" every chain flows again: {flows[-1]:.1f}s ({len(flows)} of {args.chains} chains)"
        )
    print(
        f"    processes under the killed worker: {len(descendants)};"
        f" still alive 10s after the kill: {len(orphans)}"
    )
    overlaps, twice = check_attempts(rows)
    retried = sum(1 for r in rows if r.try_number > 1)
    print(
        f"    attempts {len(rows)}, retried {retried}; overlapping attempts: {overlaps};"
        f" tasks that succeeded twice: {twice}"
    )
    print_cpu(cpu, args.chains * args.kill_steps)


def map_phase(cluster: ApiCluster, client: Any, meter: CpuMeter, args: Any) -> None:
    run_id, row, cpu = phase_run(cluster, client, meter, "b_map", args.limit)
    rows = attempts(cluster.engine, "b_map", run_id)
    instances = [r for r in rows if r.task_id.startswith("m[")]
    ok = {r.task_id for r in instances if r.state == "success"}
    source = next((r for r in rows if r.task_id == "commands" and r.state == "success"), None)
    if row is None or row.end_date is None:
        print(f"  b_map: not finished within {args.limit:.0f}s ({len(ok)} instances succeeded)")
    else:
        took = (row.end_date - row.created_at).total_seconds()
        last = max((r.end_date for r in instances if r.end_date is not None), default=None)
        span = (last - source.end_date).total_seconds() if source and last else float("nan")
        print(
            f"  b_map: {args.map} mapped bash instances, trigger -> run {row.state} {took:.1f}s;"
            f" the list's commit -> the last instance's end {span:.1f}s"
            f" ({len(ok) / max(span, 1e-6):.0f} instances/s)"
        )
    overlaps, twice = check_attempts(instances)
    retried = sum(1 for r in instances if r.try_number > 1)
    print(
        f"    instances succeeded {len(ok)} of {args.map}; attempts {len(instances)}, retried"
        f" {retried}; overlapping attempts: {overlaps}; succeeded twice: {twice}"
    )
    entries = lease_entries(cluster.engine, "b_map", run_id)
    print(f"    LeaseTasks entries that granted: {entries} ({len(ok) / max(entries, 1):.1f} each)")
    print_cpu(cpu, args.map)


def empty_phase(cluster: ApiCluster, client: Any, meter: CpuMeter, args: Any) -> None:
    for dag_id, what in (
        ("b_empty_fan", f"{args.empty} empty branches -> 1 bash join"),
        ("b_empty_join", f"{args.empty} bash branches -> 1 empty join"),
    ):
        run_id, row, cpu = phase_run(cluster, client, meter, dag_id, args.limit)
        rows = attempts(cluster.engine, dag_id, run_id)
        ok = sum(1 for r in rows if r.state == "success")
        leased = sum(1 for r in rows if r.worker_id)
        if row is None or row.end_date is None:
            print(f"  {dag_id}: not finished within {args.limit:.0f}s ({ok} tasks succeeded)")
        else:
            took = (row.end_date - row.created_at).total_seconds()
            print(f"  {dag_id}: {what}, trigger -> run {row.state} {took:.1f}s")
        entries = lease_entries(cluster.engine, dag_id, run_id)
        print(
            f"    tasks succeeded {ok}; attempts leased to a worker (a lease and a task process"
            f" each): {leased}; LeaseTasks entries that granted: {entries}"
        )
        print_cpu(cpu, ok)


def _descendants(pid: int) -> list[int]:
    stats = _all_stats()
    kids: dict[int, list[int]] = defaultdict(list)
    for p, (ppid, _, _) in stats.items():
        kids[ppid].append(p)
    found, todo = [], list(kids.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(kids.get(p, []))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _as_db_time(rows: list[Any], wall: float) -> Any:
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(wall, UTC)
    sample = next((r.start_date for r in rows if r.start_date is not None), None)
    if sample is not None and sample.tzinfo is None:
        stamp = stamp.replace(tzinfo=None)
    return stamp


def check_attempts(rows: list[Any]) -> tuple[int, int]:
    by_task: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_task[r.task_id].append(r)
    overlaps = twice = 0
    for tries in by_task.values():
        tries.sort(key=lambda r: r.try_number)
        if sum(1 for r in tries if r.state == "success") > 1:
            twice += 1
        for a, b in itertools.pairwise(tries):
            if a.end_date is None or (b.start_date is not None and b.start_date < a.end_date):
                overlaps += 1
    return overlaps, twice


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000, help="phases a and b")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--steps", type=int, default=250, help="phase c: steps per chain")
    parser.add_argument("--kill-steps", type=int, default=60, help="phase d: steps per chain")
    parser.add_argument("--map", type=int, default=1000, help="phase m: mapped instances")
    parser.add_argument("--empty", type=int, default=1000, help="phase e: branches")
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--lease-ttl", type=float, default=5.0)
    parser.add_argument("--limit", type=float, default=600, help="max seconds per phase")
    parser.add_argument(
        "--phases",
        default="abcdem",
        help="which phases to run, e.g. 'ab' (default: abcdem; i, idle, only when named)",
    )
    parser.add_argument("--idle", type=float, default=10.0, help="phase i: seconds")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = parser.parse_args()

    admin_url = os.environ.get("RAFTSCHED_TEST_PG_URL") or DEFAULT_PG
    name = f"raftsched_bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    workdir = Path(tempfile.mkdtemp(prefix="raftsched-bench-tasks-"))
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        config = {"core": {"dag_file_timeout": 120}, "scheduler": {"min_file_process_interval": 30}}
        with ApiCluster(
            workdir, url, dags=dag_files(args), lease_ttl=args.lease_ttl, config=config
        ) as cluster:
            cluster.start()
            cluster.wait_leader(timeout=90)
            client = cluster.client()
            dag_ids = {"b_bash", "b_python", "b_chains", "b_kill", "b_map"}
            dag_ids |= {"b_empty_fan", "b_empty_join"}
            cluster.wait_dags(client, dag_ids, timeout=180)
            cluster.start_worker("w1", concurrency=args.slots)
            meter = CpuMeter(cluster, admin, name)
            print(
                f"3 nodes on PostgreSQL, 1 worker x {args.slots} slots,"
                f" lease_ttl {args.lease_ttl:g}s",
                flush=True,
            )
            if "i" in args.phases:
                idle(meter, args.idle)
            if "a" in args.phases:
                flat(cluster, client, meter, "b_bash", args)
            if "b" in args.phases:
                flat(cluster, client, meter, "b_python", args)
            if "c" in args.phases:
                chains(cluster, client, meter, args)
            if "d" in args.phases:
                kill_phase(cluster, client, meter, args)
            if "e" in args.phases:
                empty_phase(cluster, client, meter, args)
            if "m" in args.phases:
                map_phase(cluster, client, meter, args)
            sys.stdout.flush()
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
