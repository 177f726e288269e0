"""A seeded random fault schedule: which nemesis when, for how long, and the settle after it.

``make_schedule(seed, duration, profile)`` is a pure function of its arguments (its own
``random.Random(seed)``), so a seed names one schedule on every machine. It lists every
nemesis kind whether or not this machine can run it; the runner records an unavailable one as
skipped in the timeline, so the same seed still lines up with the same faults elsewhere.

Each step: a fault starts ``at`` seconds into the run, heals at ``heal_at``, then the cluster
gets ``settle`` seconds with no fault before the next step. "poison" is never drawn on its
own (weight 0): every ``Profile.poison_every``-th fault is wrapped in a poison step that holds
it and sends hostile inputs meanwhile (``with_poison``), so the faults of a seed stay the same
with or without poison (``unwrapped`` gives them back). Choices that can be made in
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
    "poison",
    "power-loss",  # issue #10: scripts/partition/faults.py
    "clock-skew",
    "kill-triggerer",  # never drawn: every Nth kill-worker becomes one (Profile.triggerer_every)
)
# Kinds a "poison" step may wrap: it holds that fault and injects hostile inputs meanwhile.
POISON_WRAPS: tuple[str, ...] = tuple(n for n in NEMESES if n not in ("delay", "poison"))


@dataclass(frozen=True)
class Profile:
    fault_seconds: tuple[float, float]  # uniform range of one fault's length
    settle_seconds: tuple[float, float]
    lead_in: float  # fault-free start: the cluster elects and schedules first
    weights: dict[str, int] = field(default_factory=dict)
    # every Nth fault (the 1st, the N+1th, ...) of a kind in POISON_WRAPS becomes a "poison"
    # step wrapping it; 0: none
    poison_every: int = 0
    # every Nth plain kill-worker step (the 1st, the N+1th, ...) kills a triggerer instead
    # (same times): drawn this way, the kind left every seed's schedule as it was; 0: none
    triggerer_every: int = 0


# kill-worker weighs double: the other eight faults all hit the cluster, it hits the workers.
# "poison" weighs 0: it is never drawn on its own but wraps drawn faults (poison_every), so
# adding it left every seed's faults, times and parameters as they were.
WEIGHTS = {"kill-worker": 2, "poison": 0, "kill-triggerer": 0}
PROFILES: dict[str, Profile] = {
    # power-loss and clock-skew weigh 0 in short: appended last at weight 0 they leave the
    # CI run's schedule (seed 1) as it was; the long profile draws them (weight 1)
    "short": Profile(
        (3.0, 8.0),
        (4.0, 6.0),
        5.0,
        {**WEIGHTS, "power-loss": 0, "clock-skew": 0},
        poison_every=3,
        triggerer_every=2,
    ),
    "long": Profile((5.0, 30.0), (8.0, 15.0), 10.0, WEIGHTS, poison_every=4, triggerer_every=2),
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
    """Faults filling ``duration`` seconds; every fault heals and settles inside it. Every
    ``poison_every``-th wrappable fault is held by a "poison" step (``with_poison``)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}: choose one of {sorted(PROFILES)}")
    shape = PROFILES[profile]
    steps = with_poison(_faults(seed, duration, profile, nodes), shape.poison_every)
    return with_triggerer_kills(steps, shape.triggerer_every)


def with_triggerer_kills(steps: list[Step], every: int) -> list[Step]:
    """``steps`` with the 1st, (every+1)th, ... plain kill-worker step turned into a
    kill-triggerer step (same times; ``triggerer`` = the worker's index)."""
    if every <= 0:
        return list(steps)
    out: list[Step] = []
    seen = 0
    for step in steps:
        if step.nemesis == "kill-worker":
            if seen % every == 0:
                params = {"triggerer": step.params.get("worker", 0)}
                step = Step(step.at, step.heal_at, step.settle, "kill-triggerer", params)
            seen += 1
        out.append(step)
    return out


def with_poison(steps: list[Step], every: int) -> list[Step]:
    """``steps`` with the 1st, (every+1)th, ... fault of a kind in POISON_WRAPS wrapped in a
    "poison" step: same times; params ``under`` (the fault) and ``under_params`` (its own).
    The poison nemesis holds that fault and sends hostile inputs to every node meanwhile."""
    if every <= 0:
        return list(steps)
    out: list[Step] = []
    seen = 0
    for step in steps:
        if step.nemesis in POISON_WRAPS:
            if seen % every == 0:
                params: dict[str, Any] = {"under": step.nemesis}
                if step.params:
                    params["under_params"] = dict(step.params)
                step = Step(step.at, step.heal_at, step.settle, "poison", params)
            seen += 1
        out.append(step)
    return out


def unwrapped(steps: list[Step]) -> list[Step]:
    """``steps`` with every poison step replaced by the fault it wraps."""
    return [
        Step(s.at, s.heal_at, s.settle, s.params["under"], dict(s.params.get("under_params", {})))
        if s.nemesis == "poison" and s.params.get("under")
        else s
        for s in steps
    ]


def _faults(seed: int, duration: float, profile: str, nodes: int) -> list[Step]:
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
    if name == "clock-skew":
        from scripts.partition.faults import skew_params

        return skew_params(rng, nodes)
    return {}


def describe(steps: list[Step]) -> str:
    lines = [f"{'at':>8} {'heal':>8} {'settle':>7}  nemesis"]
    for s in steps:
        params = " ".join(f"{k}={v}" for k, v in s.params.items())
        lines.append(f"{s.at:8.2f} {s.heal_at:8.2f} {s.settle:7.2f}  {s.nemesis} {params}".rstrip())
    return "\n".join(lines)
