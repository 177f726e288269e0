"""Notice when pysyncobj's tick thread stalls, and say what it applied meanwhile (a stalled
tick on the leader becomes an election).

The tick thread applies committed entries, sends the leader's heartbeats and reads a
follower's: a tick longer than the minimum election timeout (0.15 s, docs/architecture.md
§9) on the leader makes followers stand, which is how a burst of due DAGs turned into an
election storm. :class:`TickWatch` is fed from that thread only (``on_tick`` through
``SyncObj.addOnTickCallback``, ``on_apply`` as an apply listener), so it takes no lock and
costs one clock read per tick and per applied command. A gap between two tick ends longer
than ``threshold`` is logged (at most once per ``log_every`` seconds, the rest counted) with
the commands applied in it by type.

An idle tick waits up to ``autoTickPeriod`` (50 ms) or a follower's election deadline, so
gaps below the threshold are normal and not reported. The tick thread's own CPU time in a
gap tells work (apply, pickling, sending) from waiting (the state lock, the GIL, a host whose
cores are taken by other processes).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 0.15  # seconds: raft_min_timeout, the shortest silence a follower allows


class _CpuLap:
    """A thread's own CPU time between two calls of :meth:`lap`, which that thread makes.

    Both meters below tell work from waiting with it: :class:`TickWatch` per tick of the
    tick thread, :class:`TickCpu` per tick of the leader loop."""

    __slots__ = ("_cpu_clock", "_last")

    def __init__(self, cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self._cpu_clock = cpu_clock
        self._last = 0.0

    def lap(self) -> float:
        """Seconds of CPU since the previous lap (the first: since the clock's zero)."""
        now = self._cpu_clock()
        used, self._last = now - self._last, now
        return used


class TickWatch:
    def __init__(
        self,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        log_every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.threshold = threshold
        self.log_every = log_every
        self._clock = clock
        self._cpu = _CpuLap(cpu_clock)  # the calling (tick) thread's own CPU time
        self._last_tick: float | None = None
        self._first_apply_end: float | None = None
        self._last_apply_end: float | None = None
        self._applied: Counter[str] = Counter()
        self._logged_at = float("-inf")
        self._unlogged = 0
        self.stalls = 0  # gaps over the threshold since start
        self.longest = 0.0  # the longest gap seen, seconds

    def on_tick(self) -> None:
        now = self._clock()
        cpu_used = self._cpu.lap()
        last, self._last_tick = self._last_tick, now
        applied, self._applied = self._applied, Counter()
        first, self._first_apply_end = self._first_apply_end, None
        applying = (
            (self._last_apply_end - first) if first is not None and self._last_apply_end else 0.0
        )
        self._last_apply_end = None
        if last is None:
            return
        gap = now - last
        self.longest = max(self.longest, gap)
        if gap < self.threshold:
            return
        self.stalls += 1
        if now - self._logged_at < self.log_every:
            self._unlogged += 1
            return
        self._logged_at = now
        unlogged, self._unlogged = self._unlogged, 0
        log.warning(
            "raft tick thread stalled %.0f ms, %.0f ms of it on CPU (applied %s, %.0f ms"
            " between the first and the last)%s",
            gap * 1000,
            cpu_used * 1000,
            ", ".join(f"{name} x{n}" for name, n in applied.most_common()) or "nothing",
            applying * 1000,
            f"; {unlogged} more stalls since the last report" if unlogged else "",
        )

    def on_apply(self, _log_index: int, command: Any, _result: Any) -> None:
        """An apply listener: runs right after each apply, on the tick thread. The span from
        the first to the last apply's end in a gap is a lower bound of the time applying."""
        now = self._clock()
        if self._first_apply_end is None:
            self._first_apply_end = now
        self._last_apply_end = now
        self._applied[type(command).__name__] += 1


class TickCpu:
    """The leader loop's own CPU per tick (``start``/``stop`` around each tick, on the loop's
    thread): every ``window`` seconds in which its ticks used more than ``busy`` of one core,
    one INFO line says how many ticks, how much CPU and the longest tick. Its work competes
    with the tick thread for the GIL, so a burst that keeps it busy shows here."""

    def __init__(
        self,
        *,
        window: float = 10.0,
        busy: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.window = window
        self.busy = busy
        self._clock = clock
        self._tick_cpu = _CpuLap(cpu_clock)
        self._began = clock()
        self._ticks = 0
        self._cpu = 0.0
        self._longest = 0.0

    def start(self) -> None:
        self._tick_cpu.lap()

    def stop(self) -> None:
        used = self._tick_cpu.lap()
        self._ticks += 1
        self._cpu += used
        self._longest = max(self._longest, used)
        now = self._clock()
        span = now - self._began
        if span < self.window:
            return
        if self._cpu > self.busy * span:
            log.info(
                "leader loop: %d ticks in %.0f s used %.2f s of CPU (longest tick %.0f ms)",
                self._ticks,
                span,
                self._cpu,
                self._longest * 1000,
            )
        self._began, self._ticks, self._cpu, self._longest = now, 0, 0.0, 0.0
