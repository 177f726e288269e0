#!/usr/bin/env python
"""Asset event -> consumer task start: how long after an asset event the first task of the
DAG it triggers starts on a worker (docs/architecture.md §21), on a real cluster.

3 scheduler nodes on PostgreSQL (a database of its own on $RAFTSCHED_TEST_PG_URL's server,
default 127.0.0.1:5432/test, created and dropped) and one real worker (``--slots`` slots),
started as ``scripts/bench/tasks.py`` starts them. Two phases, one event at a time (each
waits for its consumer's task before the next event: the latency of one event, not of a
backlog; one more event first warms the worker up, not counted):

x. External events: ``--events`` ``AssetService.EmitAssetEvent`` calls (what ``POST
   /api/v1/assets/events`` and ``raftsched assets event`` make), each with a client event
   id, on an asset that DAG ``b_on_external`` is scheduled on. Figures: the call's answer
   (the event and its run committed) and the consumer's first task start, both measured
   from just before the call.
p. Producer successes: ``--events`` manual runs of DAG ``b_producer``, whose one task has an
   outlet that ``b_on_producer`` is scheduled on. Measured from the producer task's last
   instant (it prints its clock as it exits; the success is reported after that) to the
   consumer's first task start: the outcome's report, its commit with the event and the
   consumer's run, and the lease of the consumer's task; split at the event's commit time
   (``asset_event.timestamp``: the committed entry's time, the leader's clock).

A consumer task start is the task process's own clock (``date +%s.%N``, its first command:
the figures include a bash start and a fork, a few ms). All processes share the machine's
clock. Printed per phase: the count, p50, p99 and max in ms (with fewer than 100 events p99
is the largest but one or the largest), and how many consumer runs each event made (one
each, or the bench says otherwise).

    .venv/bin/python scripts/bench/asset_latency.py                 # 50 events per phase
    .venv/bin/python scripts/bench/asset_latency.py --events 200 --phases x

Bounded: every event waits at most ``--timeout`` s for its consumer, and a phase stops
after ``--limit`` s (the events it has measured are printed). No asserts: prints figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))

from api_harness import ApiCluster
from harness import wait_for

from raftsched.api.gen import asset_pb2, common_pb2, dag_pb2
from raftsched.core.versions import RELEASE

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
EXTERNAL = "s3://bench/external"
PRODUCED = "s3://bench/produced"
POLL = 0.005  # seconds between two looks at a consumer's start file


def dag_files(out: Path) -> dict[str, str]:
    source = textwrap.dedent(
        """\
        from raftsched import DAG, Asset, BashTask

        OUT = @OUT@
        EXTERNAL, PRODUCED = Asset(@EXTERNAL@), Asset(@PRODUCED@)

        with DAG("b_producer", schedule=None, max_active_runs=1000000):
            BashTask(
                "make",
                command="echo {{ run_id }} $(date +%s.%N) >> " + OUT + "/produced",
                outlets=[PRODUCED],
            )

        with DAG("b_on_external", schedule=EXTERNAL, max_active_runs=1000000):
            BashTask("first", command="echo {{ run_id }} $(date +%s.%N) >> " + OUT + "/external")

        with DAG("b_on_producer", schedule=PRODUCED, max_active_runs=1000000):
            BashTask(
                "first",
                command="echo {{ triggering_asset_events[@PRODUCED@][0].source_run_id }}"
                " $(date +%s.%N) >> " + OUT + "/consumed",
            )
        """
    )
    for name, value in (("@OUT@", str(out)), ("@EXTERNAL@", EXTERNAL), ("@PRODUCED@", PRODUCED)):
        source = source.replace(name, repr(value))
    return {"assets_bench.py": source}


def read_times(path: Path) -> dict[str, list[float]]:
    """run id -> the times recorded for it (one each, unless a run ran twice)."""
    out: dict[str, list[float]] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out.setdefault(parts[0], []).append(float(parts[1]))
            except ValueError:
                continue
    return out


def wait_line(path: Path, key: str, timeout: float) -> float | None:
    """The first time recorded for ``key`` in ``path``, waiting at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = read_times(path).get(key)
        if found:
            return found[0]
        time.sleep(POLL)
    return None


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def figures(name: str, values: list[float], wanted: int) -> None:
    if not values:
        print(f"{name}: none measured of {wanted}")
        return
    ms = [v * 1000 for v in values]
    print(
        f"{name}: n={len(ms)} of {wanted}, p50 {pct(ms, 0.5):.0f} ms, p99 {pct(ms, 0.99):.0f} ms,"
        f" max {max(ms):.0f} ms",
        flush=True,
    )


def asset_runs(client: Any, dag_id: str) -> int:
    request = dag_pb2.ListRunsRequest(
        dag_id=dag_id, run_type=common_pb2.RUN_TYPE_ASSET_TRIGGERED, page_size=1000
    )
    return len(client.dags.ListRuns(request).runs)


def external_phase(client: Any, out: Path, args: argparse.Namespace) -> None:
    answered: list[float] = []
    started: list[float] = []
    stop = time.monotonic() + args.limit
    sent = 0
    for i in range(-1, args.events):  # event -1 warms up (the worker's first lease): not counted
        if time.monotonic() > stop:
            break
        t0 = time.time()
        reply = client.assets.EmitAssetEvent(
            asset_pb2.EmitAssetEventRequest(uri=EXTERNAL, event_id=f"bench-{uuid.uuid4().hex}")
        )
        if i >= 0:
            answered.append(time.time() - t0)
            sent += 1
        runs = [r.run_id for r in reply.runs if r.dag_id == "b_on_external"]
        if len(runs) != 1:
            print(f"event {i}: made runs {list(reply.runs)}, expected one of b_on_external")
            continue
        at = wait_line(out / "external", runs[0], args.timeout)
        if at is None:
            print(f"event {i}: its consumer's task did not start within {args.timeout:g} s")
            continue
        if i >= 0:
            started.append(at - t0)
    figures("x. external event -> answered (committed with its run)", answered, args.events)
    figures("x. external event -> consumer task start", started, args.events)
    times = read_times(out / "external")
    runs = asset_runs(client, "b_on_external")
    twice = sum(1 for v in times.values() if len(v) > 1)
    print(
        f"   {sent} events sent (+1 warm-up), {runs} consumer runs, {twice} consumer tasks"
        " ran twice"
    )


def event_times(engine: sa.Engine) -> dict[str, float]:
    """Producer run id -> its event's commit time (the entry's time, the leader's clock)."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT source_run_id, timestamp FROM asset_event WHERE uri = :u"),
            {"u": PRODUCED},
        )
        return {r[0]: r[1].timestamp() for r in rows}


def producer_phase(cluster: Any, client: Any, out: Path, args: argparse.Namespace) -> None:
    started: list[float] = []
    ends: dict[str, tuple[float, float]] = {}  # run id -> (producer end, consumer start)
    stop = time.monotonic() + args.limit
    sent = 0
    for i in range(-1, args.events):  # run -1 warms up: not counted
        if time.monotonic() > stop:
            break
        run_id = f"bench_{i + 1}_{uuid.uuid4().hex[:8]}"
        client.dags.TriggerDag(dag_pb2.TriggerDagRequest(dag_id="b_producer", run_id=run_id))
        sent += i >= 0
        at = wait_line(out / "consumed", run_id, args.timeout)
        produced = read_times(out / "produced").get(run_id)
        if at is None or not produced:
            print(f"producer run {i}: no consumer task start within {args.timeout:g} s")
            continue
        if i >= 0:
            started.append(at - produced[0])
            ends[run_id] = (produced[0], at)
    figures("p. producer task success -> consumer task start", started, args.events)
    try:  # where the time goes: the DB has every event once the outbox caught up
        cluster.wait_caught_up(timeout=60)
        committed = event_times(cluster.engine)
    except AssertionError:
        committed = {}
    split = [(committed[r] - e, at - committed[r]) for r, (e, at) in ends.items() if r in committed]
    figures("   of which producer end -> event committed", [a for a, _ in split], len(ends))
    figures("   and event committed -> consumer task start", [b for _, b in split], len(ends))
    times = read_times(out / "consumed")
    runs = asset_runs(client, "b_on_producer")
    twice = sum(1 for v in times.values() if len(v) > 1)
    print(
        f"   {sent} producer runs (+1 warm-up), {runs} consumer runs, {twice} consumer tasks"
        " ran twice"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=50, help="events per phase (1..1000)")
    parser.add_argument("--phases", default="xp", help="x: external events, p: producer")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=30.0, help="max s per event")
    parser.add_argument("--limit", type=float, default=300.0, help="max s per phase")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = parser.parse_args()
    if not 1 <= args.events <= 1000 or args.timeout <= 0 or args.limit <= 0:
        parser.error("--events must be within 1..1000, --timeout and --limit > 0")

    admin_url = os.environ.get("RAFTSCHED_TEST_PG_URL") or DEFAULT_PG
    name = f"raftsched_bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    workdir = Path(tempfile.mkdtemp(prefix="raftsched-bench-assets-"))
    out = workdir / "out"
    out.mkdir()
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        config = {"core": {"dag_file_timeout": 120}, "scheduler": {"min_file_process_interval": 30}}
        with ApiCluster(workdir, url, dags=dag_files(out), lease_ttl=5.0, config=config) as cluster:
            cluster.start()
            cluster.wait_leader(timeout=90)
            client = cluster.client()
            cluster.wait_dags(client, {"b_producer", "b_on_external", "b_on_producer"}, 180)
            wait_for(  # assets are refused until the cluster runs this release
                lambda: all(
                    (s or {}).get("cluster_version") == RELEASE for s in cluster.statuses().values()
                ),
                timeout=60,
                what="the cluster version of this release",
            )
            cluster.start_worker("w1", concurrency=args.slots)
            print(f"3 nodes on PostgreSQL, 1 worker x {args.slots} slots, lease_ttl 5s", flush=True)
            if "x" in args.phases:
                external_phase(client, out, args)
            if "p" in args.phases:
                producer_phase(cluster, client, out, args)
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
