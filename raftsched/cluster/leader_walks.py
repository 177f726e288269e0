"""The leader's walks of its replica for time-driven decisions, each at most once a
``WALK_PERIOD`` (a walk reads every record of its kind under the state lock, and a burst
commits, and wakes the loop, dozens of times a second; these decisions' resolution is
seconds anyway): runs past their deadline (``MissDeadlines``, core/callbacks.py), deferred
tasks past their trigger's timeout (``TimeoutTriggers``, core/handlers_triggers.py), runs past
their dagrun_timeout (``TimeoutRuns``, core/run_timeout.py). Apply re-checks each decision."""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from raftsched.core.callbacks import missed_deadlines
from raftsched.core.commands import Command, MissDeadlines, TimeoutTriggers
from raftsched.core.handlers_triggers import timed_out
from raftsched.core.run_timeout import TimeoutRuns, timed_out_runs

if TYPE_CHECKING:
    from raftsched.cluster.leader_commands import InFlightDecisions
    from raftsched.cluster.node import SchedulerNode
    from raftsched.cluster.proposer import Proposer

WALK_PERIOD = 1.0  # seconds between two walks of one kind


class LeaderWalks:
    """Mixed into ``leader_tick.LeaderTick`` (whose loop sets the attributes below)."""

    _node: SchedulerNode
    _proposer: Proposer
    _in_flight: InFlightDecisions
    _walked_at: dict[str, float]  # kind -> monotonic time of its last walk

    def _walk_commands(self, now: datetime) -> list[Command]:
        """This tick's time-driven decisions, each left out while one is in flight."""
        in_flight, make = self._in_flight, self._proposer.make
        commands: list[Command] = []
        missed = in_flight.fresh_alerts(self._walk("deadlines", missed_deadlines, now))
        if missed:  # alerted once each
            commands.append(make(MissDeadlines, runs=tuple(missed), now=now))
        late = in_flight.fresh_timeouts(self._walk("triggers", timed_out, now))
        if late:
            commands.append(make(TimeoutTriggers, keys=tuple(late), now=now))
        over = in_flight.fresh_run_timeouts(self._walk("runs", timed_out_runs, now))
        if over:
            commands.append(make(TimeoutRuns, runs=tuple(over), now=now))
        return commands

    def _walk(self, kind: str, walk: Any, now: datetime) -> list[Any]:
        walked = self.__dict__.setdefault("_walked_at", {})
        started = time.monotonic()
        if started - walked.get(kind, float("-inf")) < WALK_PERIOD:
            return []
        walked[kind] = started
        return list(self._node.read(lambda state: walk(state, now)))
