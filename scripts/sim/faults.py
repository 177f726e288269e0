"""A seeded fault schedule: what happens to the cluster, and when (virtual seconds).

Faults come one after another (each held 1-6 s, then 1-4 s of calm), so a majority is usually
reachable and the workload goes on; what they hit ("the leader") is decided when they start,
from the cluster's state, which the seed also decides. Kinds:

- ``partition``: one node (often the leader) cut off from the others, or the leader alone;
- ``crash``: a node closed (kill -9: its journal stays), restarted when the fault ends;
- ``power``: a node loses power: closed, its journal cut back to its last fsync, restarted
  when the fault ends (fsyncs come when the seed says: ``power``);
- ``blackout``: every node loses power at once (each journal cut back to its last fsync);
- ``flaky``: 10-30% of messages lost, 10-30% duplicated, delays up to 50 ms (reordering);
- ``clock``: a node's wall clock jumps (-10 min to +1 h) for the commands it stamps;
- ``crash+partition``: a crash while another node is cut off (no majority for a while).

Leadership transfers by ``hand_over`` wait on the tick thread and membership changes are not
simulated yet; a partition of the leader is how leadership moves here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = (
    "partition",
    "partition",
    "crash",
    "power",
    "blackout",
    "flaky",
    "clock",
    "crash+partition",
)


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    hold: float
    pick: float  # which node, as a share of the members (decided at start)
    leader: bool  # aim at whoever leads then
    amount: float  # clock jump in seconds, or loss/duplication share


def schedule(seed: int, seconds: float) -> list[Fault]:
    rng = random.Random(f"faults-{seed}")
    faults: list[Fault] = []
    at = rng.uniform(1.0, 3.0)
    while at < seconds:
        kind = rng.choice(KINDS)
        hold = rng.uniform(1.0, 6.0)
        amount = rng.uniform(-600.0, 3600.0) if kind == "clock" else rng.uniform(0.1, 0.3)
        faults.append(Fault(at, kind, hold, rng.random(), rng.random() < 0.6, amount))
        at += hold + rng.uniform(1.0, 4.0)
    return faults
