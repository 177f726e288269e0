"""Wakes long polls when committed commands leave tasks queued (``WorkerService.Lease``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from raftsched.core import commands as c
from raftsched.core import results as r

if TYPE_CHECKING:
    from raftsched.api.servicers.worker_batch import Rider

# Commands that never make a queued task leasable: they do not wake long polls.
_QUIET = (c.LeaseTasks, c.HeartbeatLeases, c.AppendLogs)


def _quiet(command: c.Command) -> bool:
    if isinstance(command, c.Batch):  # workers' calls proposed together (worker_batch.py)
        return bool(command.commands) and all(isinstance(s, _QUIET) for s in command.commands)
    return isinstance(command, _QUIET)


class QueueSignal:
    """Wakes long polls when committed commands leave tasks queued. ``on_apply`` is an apply
    listener (tick thread, under the state lock: it only reads which queues hold tasks and
    notifies). A poll wakes only for tasks of a queue its worker serves: a task that waits for
    a queue nobody serves does not make every other worker propose a LeaseTasks per commit."""

    def __init__(self, node: Any) -> None:
        self._node = node
        self._cond = threading.Condition()
        self._generation = 0
        self._queued: frozenset[str] | None = None  # queues holding tasks; None: wake all
        self.closed = False  # the API is stopping: long polls answer now (close())

    @property
    def generation(self) -> int:
        with self._cond:
            return self._generation

    def on_apply(self, log_index: int, command: c.Command, result: r.Result) -> None:
        if _quiet(command):
            return
        queued = self._node.read(lambda st: frozenset(st.task_queue.queued_by_queue()))
        if not queued:
            return
        self.notify(queued)

    def notify(self, queued: frozenset[str] | None = None) -> None:
        """Wake the polls of workers serving one of ``queued`` (None: every poll)."""
        with self._cond:
            self._generation += 1
            self._queued = queued
            self._cond.notify_all()

    def close(self) -> None:
        """End every long poll now, empty: its worker asks another node at once instead of
        waiting here for the server's stop grace (a planned restart)."""
        self.closed = True
        self.notify()

    def poke(self) -> None:
        """Let every waiting poll look at its own condition (a rider's result came)."""
        with self._cond:
            self._cond.notify_all()

    def wait(
        self,
        seen: int,
        timeout: float,
        queues: Iterable[str] = (),
        rider: Rider | None = None,
    ) -> bool:
        """Wait until the generation moved past ``seen`` with tasks queued in one of
        ``queues`` (empty: any), or ``rider``'s entry committed; True if either did."""
        wanted = frozenset(queues)

        def woken() -> bool:
            if rider is not None and rider.item is not None and rider.item.done.is_set():
                return True
            if self._generation == seen:
                return False
            return self._queued is None or not wanted or not wanted.isdisjoint(self._queued)

        with self._cond:
            return self._cond.wait_for(woken, max(0.0, timeout))
