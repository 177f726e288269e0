"""A burst of DAGs due at the same instant (issue #11): the leader proposes bounded entries, does
its slot maths outside the state lock that apply (on pysyncobj's tick thread) waits for, and a
node that loses and wins terms never runs two DAG-folder parses at once.

A one-replica "cluster" stands in for pysyncobj (``leader_fakes.CommittingReplica``): it commits
each command as it is submitted (applied to a real ``SchedulerState``) and notes whether the
state lock was held.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from leader_fakes import CommittingReplica, create_runs, leader_loop, proposer

from raftsched.cluster.leader import LeaderLoop, LoopSettings, _LeaderParseThread
from raftsched.cluster.leader_commands import RUNS_IN_FLIGHT, RUNS_PER_COMMAND
from raftsched.cluster.tick_watch import TickCpu, TickWatch
from raftsched.core import commands as c
from raftsched.core.due import DueIndex
from raftsched.core.model import DagSpec, Schedule, ScheduleKind, TaskSpec

SLOT = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
DAGS = 1200


class WatchedDueIndex(DueIndex):
    """Notes whether the node's state lock was held while the slot maths ran."""

    def __init__(self, node: CommittingReplica) -> None:
        super().__init__()
        self.node = node
        self.under_lock: list[bool] = []

    def collect(
        self, now: datetime, *, capacity: Callable[[str], int], limit: int, **kw: Any
    ) -> list[c.RunDecision]:
        self.under_lock.append(self.node.holding)
        return super().collect(now, capacity=capacity, limit=limit, **kw)


def minutely(i: int) -> DagSpec:
    return DagSpec(
        dag_id=f"burst_{i}",
        fileloc=f"/dags/burst_{i // 100}.py",
        schedule=Schedule(ScheduleKind.CRON, cron="* * * * *", display="* * * * *"),
        start_date=SLOT,
        catchup=False,
        tasks=(TaskSpec(task_id="noop", kind="bash", command="true"),),
    )


def test_a_burst_goes_out_in_bounded_entries_decided_outside_the_state_lock(
    tmp_path: Path,
) -> None:
    node = CommittingReplica()
    specs = [minutely(i) for i in range(DAGS)]
    for first in range(0, DAGS, 250):
        node.apply(
            c.RegisterDags(
                request_id=f"reg{first}", now=SLOT, specs=tuple(specs[first : first + 250])
            )
        )
    now = [SLOT + timedelta(seconds=0.2)]
    loop = leader_loop(node, tmp_path, now, max_runs_per_tick=500)
    due = loop._due = WatchedDueIndex(node)
    for spec in specs:
        due.upsert(spec, last_logical_date=None, paused=False)

    ticks = 0
    per_tick: list[int] = []
    while sum(1 for _ in node.state.runs()) < DAGS and ticks < 40:
        before = len(node.submitted)
        loop._tick()
        per_tick.append(sum(len(sub.runs) for sub in create_runs(node.submitted[before:])))
        ticks += 1

    creates = create_runs(node.submitted)
    runs = [(d.dag_id, d.logical_date) for sub in creates for d in sub.runs]
    assert sorted(runs) == sorted((spec.dag_id, SLOT) for spec in specs)  # one run each
    assert all(len(sub.runs) <= RUNS_PER_COMMAND for sub in creates)
    # at most RUNS_IN_FLIGHT runs in flight: here (every entry commits as it is submitted) that
    # is what one tick proposes, which spreads the burst over ticks
    assert max(per_tick) <= RUNS_IN_FLIGHT and ticks >= DAGS // RUNS_IN_FLIGHT
    # Every entry stays small (pysyncobj pickles it on the proposing thread, every replica
    # unpickles and applies it on its tick thread).
    assert max(len(pickle.dumps(command)) for command in node.submitted) < 64 * 1024
    assert due.under_lock and not any(due.under_lock)  # slot maths never under the lock


def test_a_new_term_waits_for_the_parse_an_earlier_term_left_running(tmp_path: Path) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "slow.py").write_text("import time\n\ntime.sleep(2)\n")
    node = CommittingReplica()
    loop = LeaderLoop(
        node,  # type: ignore[arg-type]
        proposer(node),
        LoopSettings(dags_folder=folder, dag_file_timeout=20.0, parse=True),
    )
    loop._start_parser()
    first = loop._parser
    assert isinstance(first, _LeaderParseThread)
    deadline = time.monotonic() + 10
    while not _parse_children() and time.monotonic() < deadline:
        time.sleep(0.02)  # the first parse has begun
    loop._step_down()  # the term ends while that parse runs
    assert loop._parser is None and first.running() and loop._retired == [first]

    loop._start_parser()  # the next term: not while the earlier parse runs
    assert loop._parser is None

    deadline = time.monotonic() + 20
    while first.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not first.running()
    loop._parse_after = time.monotonic() + 60  # a term that inherited DAGs: not yet
    loop._start_parser()
    assert loop._parser is None
    loop._parse_after = 0.0
    loop._start_parser()
    assert loop._parser is not None and loop._retired == []
    loop._stop.set()
    loop._step_down()
    assert loop._parser is None


def _parse_children() -> bool:
    """Whether a parse is under way: a ``raftsched.dags._child`` process of this one runs."""
    me = str(os.getpid())
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if stat[1] == me and b"raftsched.dags._child" in (proc / "cmdline").read_bytes():
                return True
        except (OSError, IndexError):
            continue
    return False


def test_tick_watch_reports_a_stalled_tick_and_what_it_applied(caplog: Any) -> None:
    now = [100.0]
    cpu = [0.0]
    watch = TickWatch(threshold=0.15, log_every=1.0, clock=lambda: now[0], cpu_clock=lambda: cpu[0])
    create = c.CreateRuns(request_id="c", now=SLOT, runs=())
    watch.on_tick()
    for step in (0.05, 0.05, 0.05):  # idle ticks: nothing to report
        now[0] += step
        watch.on_tick()
    assert watch.stalls == 0
    with caplog.at_level("WARNING", logger="raftsched.cluster.tick_watch"):
        now[0] += 0.1
        watch.on_apply(1, create, None)
        now[0] += 0.2
        watch.on_apply(2, create, None)
        now[0] += 0.01
        cpu[0] += 0.25
        watch.on_tick()  # 310 ms since the last tick, 200 ms of it between two applies
        now[0] += 0.2
        watch.on_tick()  # a second stall within log_every: counted, not logged
    assert watch.stalls == 2 and round(watch.longest, 3) == 0.31
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "stalled 310 ms, 250 ms of it on CPU" in messages[0]
    assert "CreateRuns x2" in messages[0] and "200 ms" in messages[0]


def test_tick_cpu_reports_a_busy_window_only(caplog: Any) -> None:
    now, cpu = [0.0], [0.0]
    meter = TickCpu(window=10.0, busy=0.1, clock=lambda: now[0], cpu_clock=lambda: cpu[0])
    with caplog.at_level("INFO", logger="raftsched.cluster.tick_watch"):
        for _ in range(10):  # 10 s, 0.5 s of CPU: not busy
            meter.start()
            cpu[0] += 0.05
            now[0] += 1.0
            meter.stop()
        assert not caplog.records
        for _ in range(10):  # the next 10 s: 3 s of CPU, the longest tick 0.3 s
            meter.start()
            cpu[0] += 0.3
            now[0] += 1.0
            meter.stop()
    (record,) = caplog.records
    assert record.getMessage() == (
        "leader loop: 10 ticks in 10 s used 3.00 s of CPU (longest tick 300 ms)"
    )
