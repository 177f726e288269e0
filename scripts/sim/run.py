"""Run seeded fault schedules against a simulated cluster at virtual speed.

    .venv/bin/python -m scripts.sim.run --seed 7                 # one seed, 2 virtual minutes
    .venv/bin/python -m scripts.sim.run --seeds 200 --minutes 1  # seeds 1..200
    .venv/bin/python -m scripts.sim.run --seeds 50 --bug refusal # a fixed bug put back
    .venv/bin/python -m scripts.sim.run --seeds 30 --jobs 1      # one process (default: a
                                                                 # worker per CPU)

Each seed: a 3-node cluster (``cluster``), the workload (``workload``), the fault schedule
(``faults``) for ``--minutes`` of virtual time, then the heal (every node restarted and
connected, a clean network), the liveness check (a proposal commits and every node applies
up to it within 60 virtual seconds), and the invariants (``invariants``). A failing seed
prints one line that replays it bit for bit (it runs itself under PYTHONHASHSEED=0: set
order must not change between processes); the last line gives the figures: simulated
cluster-minutes per wall-clock minute and per CPU-minute (user+sys of every process).
Seeds run in ``--jobs`` worker processes, one per CPU by default; the output is the same
whatever the number of jobs (seed order; a seed's history depends on the seed alone).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from raftsched.core import commands as c
from raftsched.raft.clock import VirtualClock, virtual_time
from raftsched.raft.outcomes import FailReason
from scripts.sim.bugs import PATCHES, reintroduced
from scripts.sim.cluster import SimCluster
from scripts.sim.faults import Fault, schedule
from scripts.sim.invariants import Checker
from scripts.sim.power import Disks, seeded_fsync
from scripts.sim.workload import Workload

LOOP = 0.5  # virtual seconds between rounds of the workload
CHECK = 5.0  # virtual seconds between invariant checks
FSYNC_RATES = (0.9, 0.3, 0.05)
LIVENESS = 60.0  # virtual seconds a healed cluster has to commit and converge


@dataclass
class Outcome:
    seed: int
    minutes: float
    bug: str | None
    virtual_seconds: float = 0.0
    violations: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    fingerprint: str = ""  # of every node's applied log and digest: equal on a replay

    @property
    def ok(self) -> bool:
        return not self.violations

    def repro(self) -> str:
        bug = f" --bug {self.bug}" if self.bug else ""
        return (
            f".venv/bin/python -m scripts.sim.run --seed {self.seed} --minutes {self.minutes}{bug}"
        )


class Simulation:
    def __init__(self, seed: int, minutes: float, data_dir: Path, clock: VirtualClock) -> None:
        self.seed = seed
        self.clock = clock
        self.seconds = minutes * 60.0
        disk = random.Random(f"disk-{seed}")
        # a fast, a slow or a very slow disk: the chance per 30-ms step that an fsync is done
        self.cluster = SimCluster(seed, data_dir, clock, Disks(disk, disk.choice(FSYNC_RATES)))
        self.workload = Workload(self.cluster, random.Random(f"work-{seed}"), clock())
        self.checker = Checker(self.cluster, self.workload)
        self.faults = schedule(seed, self.seconds)
        self.rng = random.Random(f"targets-{seed}")
        self.undo: list[tuple[float, str, list[str]]] = []  # (at, what, nodes)

    def run(self) -> None:
        start = self.clock()
        faults = list(self.faults)
        next_loop = next_check = start
        while self.clock() - start < self.seconds:
            now = self.clock() - start
            while faults and faults[0].at <= now:
                self._begin(faults.pop(0))
            for item in [u for u in self.undo if u[0] <= now]:
                self.undo.remove(item)
                self._end(item[1], item[2])
            if self.clock() >= next_loop:
                self.workload.tick()
                next_loop += LOOP
            if self.clock() >= next_check:
                self.checker.during()
                next_check += CHECK
            self.cluster.step()
        self.heal()
        self.liveness()
        self.checker.final()

    def _target(self, fault: Fault) -> str:
        leaders = self.cluster.leaders()
        if fault.leader and leaders:
            return leaders[0]
        members = self.cluster.addresses
        return members[int(fault.pick * len(members)) % len(members)]

    def _begin(self, fault: Fault) -> None:
        elapsed = self.clock() - self.workload.start
        target = self._target(fault)
        others = [a for a in self.cluster.addresses if a != target]
        ends = elapsed + fault.hold
        if fault.kind in ("partition", "crash+partition"):
            self.cluster.network.partition([target], others)
            self.undo.append((ends, "heal", []))
        if fault.kind == "crash":
            self._crash(target, ends)
        if fault.kind == "power" and self.cluster.nodes.get(target) is not None:
            self.cluster.power_loss(target)
            self.undo.append((ends, "restart", [target]))
        if fault.kind == "blackout":  # every node at once, as the partition suite's power loss
            for address in self.cluster.addresses:
                if self.cluster.nodes.get(address) is not None:
                    self.cluster.power_loss(address)
                    self.undo.append((ends, "restart", [address]))
        if fault.kind == "crash+partition":
            self._crash(self.rng.choice(others), ends)
        if fault.kind == "flaky":
            network = self.cluster.network
            network.loss, network.duplication = fault.amount, fault.amount
            network.delay = (0.001, 0.05)
            self.undo.append((ends, "calm", []))
        if fault.kind == "clock":
            self.workload.offsets[target] = self.workload.offsets.get(target, 0.0) + fault.amount

    def _crash(self, address: str, ends: float) -> None:
        if self.cluster.nodes.get(address) is not None:
            self.cluster.crash(address)
            self.undo.append((ends, "restart", [address]))

    def _end(self, what: str, nodes: list[str]) -> None:
        if what == "heal":
            self.cluster.network.heal()
        if what == "calm":
            network = self.cluster.network
            network.loss, network.duplication, network.delay = 0.0, 0.0, (0.001, 0.01)
        if what == "restart":
            self.checker.restarted(nodes[0])
            self.cluster.start(nodes[0])

    def heal(self) -> None:
        for _, what, nodes in sorted(self.undo):
            self._end(what, nodes)
        self.undo.clear()
        self.cluster.network.heal()
        self._end("calm", [])

    def liveness(self) -> None:
        """After the heal a proposal commits and every node applies it, within LIVENESS."""
        end = self.clock() + LIVENESS
        marker: list[tuple[object, int]] = []
        tries = 0
        while self.clock() < end:
            if marker and marker[0][1] == FailReason.SUCCESS:
                if self._converged():
                    return
            elif not marker or marker[0]:  # not sent yet, or came back without a commit
                tries += 1
                via = self.cluster.addresses[tries % len(self.cluster.addresses)]
                now = self.workload.now_at(via)
                marker = self.cluster.submit(
                    via, c.LeaseTasks(request_id=f"heal-{tries}", now=now, worker_id="heal")
                )
            for _ in range(10):
                self.cluster.step()
        where = {
            a.split(":")[0]: (n.raft.role, n.raft.commit_index, n.raft.last_applied)
            for a, n in self.cluster.live().items()
        }
        self.checker.fail(
            "liveness after heal",
            f"no commit applied everywhere in {LIVENESS:.0f} s (role, commit, applied): {where}",
        )

    def fingerprint(self) -> str:
        seen = hashlib.sha256()
        for address in self.cluster.addresses:
            seen.update(repr(sorted(self.cluster.applied[address].items())).encode())
            node = self.cluster.nodes.get(address)
            seen.update(repr(node.digest() if node else None).encode())
        seen.update(repr((self.clock(), self.cluster.network.delivered)).encode())
        return seen.hexdigest()[:16]

    def _converged(self) -> bool:
        live = self.cluster.live()
        commits = {n.raft.commit_index for n in live.values()}
        applied = {n.raft.last_applied for n in live.values()}
        return len(live) == len(self.cluster.addresses) and len(commits) == 1 and applied == commits


def _scratch() -> str | None:
    """tmpfs when there is one: the journals' meta-file renames cost more than Raft on disk."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def simulate(seed: int, minutes: float = 2.0, bug: str | None = None) -> Outcome:
    outcome = Outcome(seed, minutes, bug)
    with (
        tempfile.TemporaryDirectory(prefix=f"sim-{seed}-", dir=_scratch()) as tmp,
        reintroduced(bug),
        seeded_fsync(),
        virtual_time(VirtualClock(), seed) as clock,
    ):
        sim = Simulation(seed, minutes, Path(tmp), clock)
        started = clock()
        try:
            sim.run()
        except Exception as error:  # a crash of the simulated cluster is a finding too
            sim.checker.fail("no exception", f"{type(error).__name__}: {error}")
        finally:
            outcome.fingerprint = sim.fingerprint()
            sim.cluster.close()
        outcome.virtual_seconds = clock() - started
        outcome.violations = list(sim.checker.violations)
        outcome.counts = {
            "faults": len(sim.faults),
            "acknowledged": len(sim.workload.acked),
            "dispatched": len(sim.workload.dispatched),
            "messages": sim.cluster.network.delivered,
        }
    return outcome


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the --jobs workers), user+sys."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _simulate_args(args: tuple[int, float, str | None]) -> Outcome:
    return simulate(*args)


def outcomes(seeds: Iterable[int], minutes: float, bug: str | None, jobs: int) -> Iterator[Outcome]:
    """Each seed's outcome, in seed order. ``jobs`` > 1: seeds run in that many worker
    processes (forked, so they share this process's hash seed); a seed's history depends on
    nothing but the seed, so which worker runs it changes nothing."""
    work = ((seed, minutes, bug) for seed in seeds)
    if jobs <= 1:
        yield from map(_simulate_args, work)
        return
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        try:
            yield from pool.imap(_simulate_args, work, chunksize=1)
        finally:
            pool.terminate()  # --stop: seeds still running are not waited for
            pool.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int, help="run this seed")
    which.add_argument("--seeds", type=int, help="run seeds FIRST..FIRST+N-1")
    parser.add_argument("--first", type=int, default=1, help="first seed of --seeds (1)")
    parser.add_argument("--minutes", type=float, default=2.0, help="virtual minutes per seed (2)")
    parser.add_argument("--bug", choices=sorted(PATCHES), help="put a fixed Raft bug back")
    parser.add_argument("--stop", action="store_true", help="stop at the first failing seed")
    parser.add_argument(
        "--jobs",
        type=int,
        default=_default_jobs(),
        help="worker processes for --seeds (default: one per CPU this process may use)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print every seed's line, not only failures"
    )
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    jobs = min(args.jobs, len(seeds))
    failed = ran = 0
    virtual = 0.0
    wall = time.perf_counter()
    cpu = _cpu_seconds()
    with contextlib.closing(outcomes(seeds, args.minutes, args.bug, jobs)) as results:
        for outcome in results:
            seed = outcome.seed
            ran += 1
            virtual += outcome.virtual_seconds
            if not outcome.ok:
                failed += 1
                print(f"FAIL seed {seed} (history {outcome.fingerprint}): {outcome.violations[0]}")
                for extra in outcome.violations[1:]:
                    print(f"    {extra}")
                print(f"  repro: {outcome.repro()}")
                if args.stop:
                    break
            elif args.seed is not None or args.verbose:
                print(f"ok seed {seed}: {outcome.counts} history {outcome.fingerprint}")
    wall = time.perf_counter() - wall
    cpu = _cpu_seconds() - cpu
    minutes = virtual / 60.0
    rate = minutes / (wall / 60.0) if wall else 0.0
    per_cpu = minutes / (cpu / 60.0) if cpu else 0.0
    print(
        f"{ran} seeds, {failed} failed; {minutes:.1f} simulated cluster-minutes"
        f" in {wall:.1f} s wall, {cpu:.1f} s CPU ({jobs} job{'s' if jobs != 1 else ''}):"
        f" {rate:.0f} simulated cluster-minutes per wall-clock minute, {per_cpu:.0f} per CPU-minute"
    )
    return 1 if failed else 0


def _pin_hash_seed() -> None:
    """Run again under PYTHONHASHSEED=0: str hashes order sets (pysyncobj's peers among
    them), so with a random hash seed the same seed sent messages in another order in
    another process and a repro line did not replay."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "scripts.sim.run", *sys.argv[1:]])


if __name__ == "__main__":
    _pin_hash_seed()
    sys.exit(main())
