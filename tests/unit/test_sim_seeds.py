"""The simulator's CI seed set (scripts/sim): twelve fixed seeds, each half a virtual
minute of faults against the scheduling workload, every invariant holding; the same seed
replays the same history. Well under a minute of wall time on a quiet machine."""

from __future__ import annotations

import pytest

from scripts.sim.run import simulate

CI_SEEDS = tuple(range(1, 13))
MINUTES = 0.5


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_a_ci_seed_holds_every_invariant(seed: int) -> None:
    outcome = simulate(seed, MINUTES)
    assert outcome.ok, f"{outcome.violations}\nreproduce with: {outcome.repro()}"
    assert outcome.counts["faults"] > 0 and outcome.counts["dispatched"] > 0


def test_a_seed_replays_bit_for_bit() -> None:
    first, again = simulate(9, 0.25), simulate(9, 0.25)
    assert first.fingerprint == again.fingerprint
    assert first.counts == again.counts
