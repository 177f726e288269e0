"""Which task queues some live worker serves, for the "waiting" note of queued tasks.

Read from every node's heartbeat row (``extra["workers"]``: the workers each node saw call,
``cluster/workers_seen.py``) plus this node's own sightings, which are fresher than its row;
cached for :data:`CACHE_SECONDS` so a page of task instances costs one small DB read at most.
Unknown (no note at all) when this node has no DB or the DB does not answer: a note must not
claim that no worker serves a queue when it cannot tell.

:meth:`LiveWorkers.roster` is the workers page's read of the same rows: live workers with
what they said about themselves, and those lost recently with why (``workers_seen.roster``).
Without the DB it shows this node's own sightings only.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from raftsched.api.gen import common_pb2
from raftsched.api.servicers.pools import pool_notes
from raftsched.cluster.workers_seen import (
    EXTRA_KEY,
    LOST_KEY,
    live_workers,
    roster,
    served_queues,
    waiting_note,
)
from raftsched.core import mapping
from raftsched.core.model import DEFAULT_QUEUE
from raftsched.core.pool_table import pool_of, slots_of
from raftsched.errors import StoreUnavailable
from raftsched.store.heartbeats import list_heartbeats

if TYPE_CHECKING:
    from raftsched.api.servicers.context import ApiContext

log = logging.getLogger(__name__)

CACHE_SECONDS = 1.0


Roster = tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]


class LiveWorkers:
    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, tuple[str, ...]] | None] | None = None
        self._roster: tuple[float, Roster] | None = None

    def roster(self) -> Roster:
        """(live, lost) workers, each {worker_id: record}: see ``workers_seen.roster``."""
        now = time.monotonic()
        with self._lock:
            if self._roster is not None and now - self._roster[0] < CACHE_SECONDS:
                return self._roster[1]
        beats = self._beats() or []
        published: list[Any] = [beat.extra.get(EXTRA_KEY) for beat in beats]
        lost: list[Any] = [beat.extra.get(LOST_KEY) for beat in beats]
        if self.ctx.workers_seen is not None:
            lost.append(self.ctx.workers_seen.lost())  # its silent ones leave published()
            published.append(self.ctx.workers_seen.published())
        found = roster(published, lost, time.time())
        with self._lock:
            self._roster = (now, found)
        return found

    def _beats(self) -> list[Any] | None:
        """Every node's heartbeat row; None without a DB or when it does not answer."""
        engine = self.ctx.engine
        if engine is None:
            return None
        try:
            return list(list_heartbeats(engine))
        except StoreUnavailable as err:
            log.info("live workers unknown (metadata DB unavailable): %s", err)
            return None

    def workers(self) -> dict[str, tuple[str, ...]] | None:
        """Live worker id -> the queues it serves; None when unknown (see the module doc)."""
        now = time.monotonic()
        with self._lock:
            if self._cached is not None and now - self._cached[0] < CACHE_SECONDS:
                return self._cached[1]
        found = self._read()
        with self._lock:
            self._cached = (now, found)
        return found

    def _read(self) -> dict[str, tuple[str, ...]] | None:
        beats = self._beats()
        if beats is None:
            return None
        published: list[Any] = [beat.extra.get(EXTRA_KEY) for beat in beats]
        if self.ctx.workers_seen is not None:
            published.append(self.ctx.workers_seen.published())
        return live_workers(published, time.time())

    def annotate(self, record: Any, task_instances: list[Any]) -> None:
        """Set ``queue`` on each TaskInstance message (from the DAG's current spec,
        ``record``: None when the DAG is gone) and ``waiting`` on each QUEUED one whose
        queue no live worker serves, else whose pool grants nothing now (``pools.py``)."""
        tasks = {t.task_id: t for t in record.spec.tasks} if record is not None else {}
        served: frozenset[str] | None = None
        looked = False
        notes: dict[tuple[str, int], str] | None = None
        for ti in task_instances:
            task = tasks.get(mapping.task_of(ti.key.task_id))
            ti.queue = task.queue if task is not None else DEFAULT_QUEUE
            if ti.state != common_pb2.TASK_STATE_QUEUED:
                continue
            if not looked:
                workers, looked = self.workers(), True
                served = served_queues(workers) if workers is not None else None
            ti.waiting = waiting_note(ti.queue, served)
            if not ti.waiting and task is not None:
                notes = pool_notes(self.ctx, record) if notes is None else notes
                ti.waiting = notes.get((pool_of(task), slots_of(task)), "")
