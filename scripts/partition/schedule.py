"""A seeded random fault schedule: which nemesis when, for how long, and the settle after it.

``make_schedule(seed, duration, profile)`` is a pure function of its arguments (its own
``random.Random(seed)``), so a seed names one schedule on every machine. It lists every
nemesis kind whether or not this machine can run it; the runner records an unavailable one as
skipped in the timeline, so the same seed still lines up with the same faults elsewhere.

Each step: a fault starts ``at`` seconds into the run, heals at ``heal_at``, then the cluster
gets ``settle`` seconds with no fault before the next step. Choices that can be made in
advance are made here (``params``: which node to kill, the loss probability); choices that
depend on the live cluster (who leads) are made when the fault starts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

NEMESES: tuple[str, ...] = (
    "isolate-leader",
    "split",
    "bridge",
    "kill",
    "pause-leader",
    "loss",
    "delay",
    "db-restart",
    "kill-worker",
)


@dataclass(frozen=True)
class Profile:
    fault_seconds: tuple[float, float]  # uniform range of one fault's length
    settle_seconds: tuple[float, float]
    lead_in: float  # fault-free start: the cluster elects and schedules first
    weights: dict[str, int] = field(default_factory=dict)


# kill-worker weighs double: the other eight faults all hit the cluster, it hits the workers
WEIGHTS = {"kill-worker": 2}
PROFILES: dict[str, Profile] = {
    "short": Profile((3.0, 8.0), (4.0, 6.0), 5.0, WEIGHTS),
    "long": Profile((5.0, 30.0), (8.0, 15.0), 10.0, WEIGHTS),
}


@dataclass(frozen=True)
class Step:
    at: float
    heal_at: float
    settle: float
    nemesis: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return self.heal_at - self.at

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "heal_at": self.heal_at,
            "settle": self.settle,
            "nemesis": self.nemesis,
            "params": dict(self.params),
        }


def make_schedule(
    *, seed: int, duration: float, profile: str = "short", nodes: int = 3
) -> list[Step]:
    """Faults filling ``duration`` seconds; every fault heals and settles inside it."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: choose one of {sorted(PROFILES)}")
    shape = PROFILES[profile]
    rng = random.Random(seed)
    names = list(NEMESES)
    weights = [shape.weights.get(name, 1) for name in names]
    steps: list[Step] = []
    t = shape.lead_in
    while True:
        name = rng.choices(names, weights)[0]
        length = round(rng.uniform(*shape.fault_seconds), 2)
        settle = round(rng.uniform(*shape.settle_seconds), 2)
        params = _params(name, rng, nodes)
        if t + length + settle > duration:
            return steps
        heal_at = round(t + length, 2)
        steps.append(Step(t, heal_at, settle, name, params))
        t = round(heal_at + settle, 2)


def _params(name: str, rng: random.Random, nodes: int) -> dict[str, Any]:
    if name == "kill":
        return {"node": rng.randrange(nodes)}
    if name == "loss":
        a, b = rng.sample(range(nodes), 2)
        return {"link": [a, b], "probability": rng.choice([0.2, 0.4, 0.6])}
    if name == "delay":
        a, b = rng.sample(range(nodes), 2)
        return {"link": [a, b], "delay_ms": rng.choice([50, 200, 500])}
    if name == "kill-worker":
        return {"worker": rng.randrange(2)}
    if name in ("split", "bridge"):
        return {"shuffle": rng.randrange(1 << 30)}
    return {}


def describe(steps: list[Step]) -> str:
    lines = [f"{'at':>8} {'heal':>8} {'settle':>7}  nemesis"]
    for s in steps:
        params = " ".join(f"{k}={v}" for k, v in s.params.items())
        lines.append(f"{s.at:8.2f} {s.heal_at:8.2f} {s.settle:7.2f}  {s.nemesis} {params}".rstrip())
    return "\n".join(lines)
