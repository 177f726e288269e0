"""The Raft layer's clock and randomness: pysyncobj's by default, a caller's in a simulation.

pysyncobj takes no clock: its timers (election deadlines, heartbeats, leader fallback) read
the module-level ``pysyncobj.syncobj.monotonicTime`` (CLOCK_MONOTONIC_RAW) and its election
timeouts draw from the module ``random``. Our own timers beside them (the tick's wake-up at
the election deadline, the restart hold) must read the same clock, so they call :func:`now`.

:func:`virtual_time` replaces both for the duration of a block: time is a
:class:`VirtualClock` that moves only when the caller advances it, and election timeouts
come from a ``random.Random(seed)``. It patches pysyncobj's module globals (the upstream
behaviour it corrects: no injectable clock or random source), so it is for one-process
simulations and tests only, never while a node with its own tick thread runs.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator

import pysyncobj.syncobj as _pysyncobj_syncobj
from pysyncobj.monotonic import monotonic as _pysyncobj_clock

_source: Callable[[], float] = _pysyncobj_clock


def now() -> float:
    """Seconds on the clock of pysyncobj's timers (not ``time.monotonic``: another clock)."""
    return _source()


class VirtualClock:
    """Time that moves only when ``advance`` is called."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextlib.contextmanager
def virtual_time(clock: VirtualClock, seed: int) -> Iterator[VirtualClock]:
    global _source
    saved = (_source, _pysyncobj_syncobj.monotonicTime, _pysyncobj_syncobj.random)
    _source = clock
    _pysyncobj_syncobj.monotonicTime = clock
    _pysyncobj_syncobj.random = random.Random(seed)  # type: ignore[assignment]
    try:
        yield clock
    finally:
        _source, _pysyncobj_syncobj.monotonicTime, _pysyncobj_syncobj.random = saved
