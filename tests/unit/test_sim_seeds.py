"""The simulator's CI seed set (scripts/sim): twelve fixed seeds, each half a virtual minute
of faults against the scheduling workload, every invariant holding; the same seed replays the
same history in another process, and in worker processes (``--jobs``) as in one. Run as the
command line runs them (a process under PYTHONHASHSEED=0), so a failure's repro line replays
exactly what failed here. About 15 s of CPU time."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI_SEEDS = 12
MINUTES = 0.5


def _sim(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "scripts.sim.run", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_ci_seeds_hold_every_invariant() -> None:
    done = _sim("--seeds", str(CI_SEEDS), "--minutes", str(MINUTES))
    assert done.returncode == 0, done.stdout[-4000:]
    assert f"{CI_SEEDS} seeds, 0 failed" in done.stdout


def test_a_seed_replays_bit_for_bit_in_another_process() -> None:
    lines = [_sim("--seed", "9", "--minutes", "0.25").stdout for _ in range(2)]
    found = [re.search(r"^ok seed 9: (.*)$", out, re.M) for out in lines]
    assert all(found), lines
    assert found[0].group(1) == found[1].group(1)  # type: ignore[union-attr]
    assert "dispatched" in found[0].group(1)  # type: ignore[union-attr]


def test_worker_processes_change_no_seed_history() -> None:
    """``--jobs 2`` runs seeds in two forked workers: every seed's line is what one process
    gives, in seed order."""
    lines = [
        _sim("--seeds", "3", "--minutes", "0.25", "--jobs", jobs, "--verbose").stdout
        for jobs in ("1", "2")
    ]
    per_seed = [re.findall(r"^ok seed \d+: .*$", out, re.M) for out in lines]
    assert [line.split(":")[0] for line in per_seed[0]] == [f"ok seed {s}" for s in (1, 2, 3)]
    assert per_seed[0] == per_seed[1], lines
    assert "(2 jobs)" in lines[1]
