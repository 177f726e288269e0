"""CPU of the state digest per 1,000 commands, scheme v1 against v2 (prints figures).

    .venv/bin/python scripts/bench/digest.py              # both schemes, ~1 minute
    .venv/bin/python scripts/bench/digest.py --profile    # and the digest's share of apply

One process, CPU time (``time.process_time``), so other load on the machine does not move
the figures much. The driver is a follower's apply of a realistic mix: CreateRuns of 10 runs
(5 tasks each), then LeaseTasks of 8 and a CompleteAttempt per grant until everything ran,
on 50 registered DAGs. The same commands are applied to a state at cluster version 2 (v1
digest) and to one raised to ``DIGEST_V2_RELEASE`` by SetClusterVersion (v2 digest).
``--profile`` runs each under cProfile and sums the functions of the digest's modules.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from state_machine import T0, Log, decision, registered

from raftsched.core import commands as c
from raftsched.core import versions as vs
from raftsched.core.digest_sum import DigestSum

DIGEST_FILES = ("core/digest.py", "core/digest_v2.py")


def workload(log: Log, runs: int) -> int:
    """Apply the mix; the number of commands applied."""
    applied = 0
    for start in range(0, runs, 10):
        batch = tuple(decision(f"dag_{k % 50:06}", k // 50) for k in range(start, start + 10))
        log.apply(c.CreateRuns(request_id=log.rid(), now=T0, runs=batch))
        applied += 1
        while True:
            now = T0 + timedelta(seconds=applied)
            lease = c.LeaseTasks(request_id=log.rid(), now=now, worker_id="w", max_tasks=8)
            grants = log.apply(lease).value
            applied += 1
            if not grants:
                break
            for grant in grants:
                key, token = grant.lease.key, grant.lease.token
                done = c.CompleteAttempt(
                    request_id=log.rid(), now=now, key=key, token=token, success=True
                )
                log.apply(done)
                applied += 1
    return applied


def prepared(version: int) -> Log:
    # SetClusterVersion is valid up to this release; a checkout still at release 2 (v2 comes
    # with release 3) is let through here, so the bench runs on either side of that bump
    vs.RELEASE = max(vs.RELEASE, version)
    log = registered(50, 5)
    if version > vs.BASELINE_RELEASE:
        result = log.apply(c.SetClusterVersion(request_id=log.rid(), now=T0, version=version))
        assert result.ok, result
    return log


def cpu_per_1000(version: int, runs: int, digest: bool = True) -> float:
    """CPU seconds per 1,000 commands of the mix at ``version`` (``digest`` False: with every
    share stubbed to 0, to see what the rest of apply costs)."""
    log = prepared(version)
    methods = {name: getattr(DigestSum, name) for name in ("add", "remove", "share")}
    if not digest:
        for name in methods:
            setattr(DigestSum, name, lambda self, fp, *args: 0)
    try:
        gc.collect()
        start = time.process_time()
        commands = workload(log, runs)
        seconds = time.process_time() - start
    finally:
        for name, method in methods.items():
            setattr(DigestSum, name, method)
    if digest:
        state = log.state
        assert state.digest_scheme() == vs.digest_scheme(version)
        assert state.digest() == state.recompute_digest(), "incremental != recomputed"
    return seconds / commands * 1000


def profile_share(version: int, runs: int) -> float:
    """The digest modules' own share of apply's time under cProfile (which inflates calls)."""
    log = prepared(version)
    profiler = cProfile.Profile()
    profiler.enable()
    workload(log, runs)
    profiler.disable()
    stats = pstats.Stats(profiler)
    own = sum(
        row[2]  # tottime
        for (filename, _, _), row in stats.stats.items()  # type: ignore[attr-defined]
        if filename.endswith(DIGEST_FILES)
    )
    return own / stats.total_tt  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each; the least counts")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    versions = (vs.DIGEST_V2_RELEASE - 1, vs.DIGEST_V2_RELEASE)
    best: dict[tuple[int, bool], float] = {}
    for _ in range(args.repeat):  # interleaved, so a burst of load hits both alike
        for version in versions:
            for digest in (True, False):
                figure = cpu_per_1000(version, args.runs, digest)
                key = (version, digest)
                best[key] = min(best.get(key, figure), figure)
    print(
        "Digest CPU per 1,000 commands (CreateRuns of 10 / LeaseTasks of 8 / CompleteAttempt,"
        f" {args.runs:,} runs, least of {args.repeat}):"
    )
    for version in versions:
        total, rest = best[(version, True)], best[(version, False)]
        scheme = vs.digest_scheme(version)
        print(
            f"  v{scheme} (cluster version {version}): apply {total:6.3f} CPU s, of which the"
            f" digest {total - rest:6.3f} ({(total - rest) / total:4.0%})"
        )
        if args.profile:
            print(
                f"      cProfile: digest modules' own time {profile_share(version, args.runs):4.0%}"
            )


if __name__ == "__main__":
    main()
