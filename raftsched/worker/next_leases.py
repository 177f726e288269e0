"""What the worker's outcome calls lease (worker.reports.Leasing): a chain's next step
without a long poll's round trip.

The call that reports attempts' outcomes (CompleteBatch) asks for as many tasks as those
attempts free slots; the cluster leases them in the same Raft entry, after the outcomes, so a
chain's next step comes back in the answer to its upstream's outcome. What comes back is held
(the death report names it first), confirmed and started as a long poll's grants are; while
the worker stops, it is handed back at once.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from raftsched.core.model import TaskKey
from raftsched.worker.death_report import OUTCOMES
from raftsched.worker.transport import Assignment

log = logging.getLogger("raftsched.worker.loop")


class NextLeases:
    """Mixed into ``loop.Worker`` (which provides the attributes below)."""

    settings: Any
    _running: dict[tuple[TaskKey, int], Any]
    _changed: threading.Condition
    _stopping: threading.Event

    if TYPE_CHECKING:
        # loop.Worker's and its other mixins'
        def _hold(self, leases: list[Assignment]) -> None: ...
        def _polling(self, request_id: str, max_tasks: int, slot: str = ...) -> None: ...
        def _release(self, leases: list[tuple[TaskKey, int]]) -> None: ...
        def _confirm(
            self, leases: list[Assignment], sent: float
        ) -> list[tuple[Assignment, float]]: ...
        def _start(self, a: Assignment, granted: float | None = None) -> None: ...

    def slots(self, outcomes: int) -> int:
        """The slots of attempts whose outcomes go now, asked for again in the same call; no
        more than are free once they are gone (an outcome retried after an unanswered call
        has had its slot filled already)."""
        if self._stopping.is_set():
            return 0
        with self._changed:
            free = self.settings.concurrency - (len(self._running) - outcomes)
        return max(0, min(outcomes, free))

    def sending(self, request_id: str, max_tasks: int) -> None:
        self._polling(request_id, max_tasks, OUTCOMES)

    def granted(self, grants: list[Assignment], sent: float) -> None:
        self._hold(grants)
        self._polling("", 0, OUTCOMES)
        if not grants:
            return
        if self._stopping.is_set():  # one call for all, not one per grant (see _start)
            log.info("handing back %d lease(s): shutting down", len(grants))
            self._release([(a.key, a.token) for a in grants])
            return
        waiting = {(a.key, a.token) for a in grants}
        try:
            for assignment, at in self._confirm(grants, sent):
                self._start(assignment, at)
                waiting.discard((assignment.key, assignment.token))
            waiting.clear()  # what _confirm did not return it dropped or handed back itself
        finally:
            if waiting:  # something raised: what did not start goes back now, not at its TTL
                self._release(list(waiting))
