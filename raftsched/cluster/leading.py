"""A thread that runs a function only while this node leads (:class:`LeadingThread`).

The leader loop (``leader.py``) and the materializer driver (``materializer_driver.py``) each
act only while this node is the Raft leader, and stop at once when it is not. This is their
one shared shape: a daemon thread that, while this node follows (or ``may_lead`` says no),
idles on ``wake`` (set on every role change by its owner's role listener) and, once it leads,
calls ``lead(term)``. ``lead`` returns when it stops leading that term (its own loop checks
:meth:`LeadingThread.leading` between steps); an exception from it is handed to ``failed`` and
the thread retries after ``retry_after`` seconds. Leadership alone causes no side effect:
``lead`` proposes commands, and only what commits counts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

IDLE_POLL = 0.2  # seconds between two looks at the role while not leading


class _Node(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def term(self) -> int: ...


class LeadingThread:
    """Runs ``lead(term)`` on a daemon thread named ``name`` while ``node`` leads.

    - ``may_lead``: a further condition to lead (None: leading is enough).
    - ``idle``: called each time the thread finds it may not lead (reset follower state).
    - ``failed``: called in the ``except`` block when ``lead`` raised (log it there, with its
      traceback); the thread then waits ``retry_after`` seconds (cut short by :meth:`stop`).
    - ``after``: called whenever ``lead`` ended, raised or not (step down).
    """

    def __init__(
        self,
        node: _Node,
        lead: Callable[[int], None],
        *,
        name: str,
        retry_after: float,
        failed: Callable[[Exception], None],
        may_lead: Callable[[], bool] | None = None,
        idle: Callable[[], None] | None = None,
        after: Callable[[], None] | None = None,
    ) -> None:
        self._node = node
        self._lead = lead
        self._name = name
        self._retry_after = retry_after
        self._failed = failed
        self._may_lead = may_lead
        self._idle = idle
        self._after = after
        self.wake = threading.Event()  # set it to look at the role (or end a wait) now
        self.stopping = threading.Event()  # set by stop(): lead() must return soon
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def leading(self, term: int) -> bool:
        """Not stopping, and still the leader of ``term``."""
        return not self.stopping.is_set() and self._node.is_leader and self._node.term == term

    def _run(self) -> None:
        while not self.stopping.is_set():
            if not self._node.is_leader or (self._may_lead is not None and not self._may_lead()):
                if self._idle is not None:
                    self._idle()
                self.wake.wait(IDLE_POLL)
                self.wake.clear()
                continue
            try:
                self._lead(self._node.term)
            except Exception as err:
                self._failed(err)
                self.stopping.wait(self._retry_after)
            finally:
                if self._after is not None:
                    self._after()
