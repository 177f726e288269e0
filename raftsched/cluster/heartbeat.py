"""Each node's heartbeat row in the metadata DB, every ``scheduler_heartbeat_sec``.

Own thread; one upsert per beat. DB errors are logged (once per outage) and never stop the
node: the heartbeat is an observation, the Raft log is the truth.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from raftsched.errors import RaftschedError
from raftsched.store.heartbeats import NodeHeartbeat

log = logging.getLogger(__name__)


class HeartbeatWriter:
    def __init__(
        self,
        build: Callable[[], NodeHeartbeat],
        write: Callable[[NodeHeartbeat], None],
        *,
        interval: float,
    ) -> None:
        self._build = build
        self._write = write
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ok = True
        self.beats = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def beat(self) -> None:
        try:
            self._write(self._build())
        except RaftschedError as err:
            if self.ok:
                log.warning("heartbeat not recorded: %s", err)
            self.ok = False
            return
        except Exception:
            log.exception("heartbeat not recorded")
            self.ok = False
            return
        if not self.ok:
            log.info("heartbeats recorded again")
        self.ok = True
        self.beats += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.beat()
            self._stop.wait(self._interval)
