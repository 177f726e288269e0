"""A one-replica stand-in for pysyncobj and a leader loop ticked by hand, for the leader's
unit tests (test_cluster_leader_pipeline.py, test_leader_tick_burst.py).

Every command submitted is applied to a real ``SchedulerState`` when it commits: at once
(:class:`CommittingReplica`) or when the test says so (:class:`OneReplica`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from raftsched.cluster.leader import LeaderLoop, LoopSettings
from raftsched.cluster.proposer import Proposer
from raftsched.core import commands as c
from raftsched.core.results import Result
from raftsched.core.state import SchedulerState
from raftsched.raft.outcomes import FailReason


class FakeNode:
    """What the proposer and the leader loop use of a node, on one replica that always leads;
    ``holding`` is True inside ``read`` (the node's state lock)."""

    def __init__(self) -> None:
        self.state = SchedulerState()
        self.index = 0
        self.submitted: list[c.Command] = []
        self.leader_address: str | None = "127.0.0.1:1"
        self.quorum = True
        self.is_leader = True
        self.term = 1
        self.fatal_error = None
        self.apply_error = None
        self.holding = False
        self.reads = 0

    def submit(self, command: c.Command, callback: Callable[[Any, int], None]) -> None:
        raise NotImplementedError  # when a command commits is up to each fake

    def read(self, fn: Callable[[SchedulerState], Any]) -> Any:
        self.reads += 1
        self.holding = True
        try:
            return fn(self.state)
        finally:
            self.holding = False

    def apply(self, command: c.Command) -> Result:
        """Commit ``command``: apply it at the next log index."""
        self.index += 1
        return self.state.apply(command, log_index=self.index)

    def add_apply_listener(self, _listener: Any) -> None: ...

    def remove_apply_listener(self, _listener: Any) -> None: ...

    def add_role_listener(self, _listener: Any) -> None: ...


class CommittingReplica(FakeNode):
    """Commits every command when it is submitted."""

    def submit(self, command: c.Command, callback: Callable[[Any, int], None]) -> None:
        self.submitted.append(command)
        callback(self.apply(command), FailReason.SUCCESS)


class OneReplica(FakeNode):
    """Holds submitted commands until the test commits (or fails) them with :meth:`answer`."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: deque[tuple[c.Command, Callable[[Any, int], None]]] = deque()

    def submit(self, command: c.Command, callback: Callable[[Any, int], None]) -> None:
        self.submitted.append(command)
        self.pending.append((command, callback))

    def answer(self, position: int = 0, outcome: int = FailReason.SUCCESS) -> c.Command:
        """Commit (apply, call back) or fail the pending command at ``position``."""
        command, callback = self.pending[position]
        del self.pending[position]
        if outcome == FailReason.SUCCESS:
            callback(self.apply(command), outcome)
        else:
            callback(None, outcome)
        return command


def proposer(node: FakeNode, commit_timeout: float = 5.0) -> Proposer:
    return Proposer(node, commit_timeout=commit_timeout)  # type: ignore[arg-type]


def leader_loop(node: FakeNode, folder: Path, clock: list[datetime], **settings: Any) -> LeaderLoop:
    """A leader loop of ``node``'s current term that does not parse ``folder``, its due index
    built from the DAGs registered so far, its clock ``clock[0]``; ticked by the test."""
    loop = LeaderLoop(
        node,  # type: ignore[arg-type]
        proposer(node),
        LoopSettings(dags_folder=folder, parse=False, **settings),
        clock=lambda: clock[0],
    )
    loop._term = node.term
    loop._rebuild_due()
    return loop


def create_runs(commands: Iterable[c.Command]) -> list[c.CreateRuns]:
    """The ``CreateRuns`` among ``commands``, in a ``Batch`` or not."""
    return [
        sub
        for command in commands
        for sub in (command.commands if isinstance(command, c.Batch) else (command,))
        if isinstance(sub, c.CreateRuns)
    ]
