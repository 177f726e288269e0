"""GetTaskLog's stream: an attempt's log chunks from the metadata DB, followed live.

The stream sends the attempt's chunks from the DB after ``after_seq``; with ``follow`` it polls
every :data:`FOLLOW_INTERVAL` s while the attempt is yet to end (queued, up for retry,
running), and ends once it ended and every chunk it wrote is in the DB (or the client
cancels). A replica that does not know the task yet (it lags the node that answered the
trigger) defers to the DB. :class:`~raftsched.api.servicers.dags.DagServicer` serves it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import grpc

from raftsched.api.servicers import bounds, convert
from raftsched.api.servicers.context import ApiContext
from raftsched.core import limits
from raftsched.core.model import TaskKey, TaskState
from raftsched.core.snapshot import attempt_number
from raftsched.errors import StatusError
from raftsched.store import queries

FOLLOW_INTERVAL = 0.5
# How long a followed log waits for this replica to learn of a task before NOT_FOUND.
REPLICA_CATCH_UP_SEC = 3.0
# States in which an attempt (DB row or live) has not started yet.
ATTEMPTS_TO_COME = frozenset({TaskState.NONE, TaskState.QUEUED, TaskState.UP_FOR_RETRY})
# States in which an attempt (numbered as in the DB: see attempt_number) has yet to end.
UNFINISHED_ATTEMPT_STATES = ATTEMPTS_TO_COME | {TaskState.RUNNING}
LOG_BATCH = 1000


class TaskLogs:
    """GetTaskLog for one node: :meth:`stream` yields the chunks of one task attempt."""

    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    def stream(self, key: TaskKey, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        bounds.count("try_number", request.try_number, 0, limits.MAX_TRY_NUMBER)
        bounds.count("after_seq", request.after_seq, 0, limits.MAX_JSON_INT)
        engine = self.ctx.require_engine()
        # A follower may not have applied the trigger the caller just got an answer for (from
        # another node); a follow waits for it a little before calling the task unknown.
        catch_up = REPLICA_CATCH_UP_SEC if request.follow else 0.0
        try_number = request.try_number or self._latest_try(engine, key, catch_up)
        after = int(request.after_seq)
        finished_at_seq: int | None = None
        while True:
            chunks = queries.read_log(
                engine, key.dag_id, key.run_id, key.task_id, try_number,
                after_seq=after, limit=LOG_BATCH,
            )  # fmt: skip
            for chunk in chunks:
                yield convert.log_chunk(chunk, try_number)
                after = chunk.chunk_seq
            if len(chunks) == LOG_BATCH:
                continue
            if not request.follow or not context.is_active():
                return
            if finished_at_seq is not None:
                if self.ctx.node.read(lambda st: st.outbox_acked_seq) >= finished_at_seq:
                    if not queries.read_log(
                        engine, key.dag_id, key.run_id, key.task_id, try_number,
                        after_seq=after, limit=1,
                    ):  # fmt: skip
                        return
                    continue
            else:
                running, seq = self.ctx.node.read(
                    functools.partial(_attempt_state, key=key, try_number=try_number)
                )
                if running is None:  # not in this replica: lagging, or forgotten after retention
                    # The outbox is written in order: once the DB has the attempt's end, it
                    # has every chunk the attempt logged before it.
                    running = not _finished_in_db(engine, key, try_number)
                    seq = 0
                if not running:
                    finished_at_seq = seq
                    continue
            time.sleep(FOLLOW_INTERVAL)

    def _latest_try(self, engine: Any, key: TaskKey, catch_up: float = 0.0) -> int:
        give_up_at = time.monotonic() + catch_up
        while True:
            live = self.ctx.node.read(functools.partial(_current_attempt, key=key))
            if live:
                return int(live)
            rows = queries.list_task_instances(engine, key.dag_id, key.run_id, task_id=key.task_id)
            started = [r.try_number for r in rows if r.state not in ATTEMPTS_TO_COME]
            if started or rows:
                return max(started or [r.try_number for r in rows])
            if time.monotonic() >= give_up_at:
                raise StatusError(
                    grpc.StatusCode.NOT_FOUND,
                    f"task {key.task_id!r} of run {key.run_id!r} of DAG {key.dag_id!r}"
                    " not found, or it never ran",
                )
            time.sleep(FOLLOW_INTERVAL / 5)


def _attempt_state(state: Any, key: TaskKey, try_number: int) -> tuple[bool | None, int]:
    """(attempt ``try_number`` yet to finish? None: this replica does not know the task; the
    outbox's last seq).

    Attempts are numbered as in the DB (:func:`attempt_number`): a queued task is already at
    the attempt a worker will lease next."""
    ti = state.task_instance(key)
    last_seq = int(state.outbox_last_seq)
    if ti is None:
        return None, last_seq
    unfinished = try_number == attempt_number(ti) and ti.state in UNFINISHED_ATTEMPT_STATES
    return unfinished, last_seq


def _current_attempt(state: Any, key: TaskKey) -> int | None:
    """The newest attempt that started (its log is the one to show), else the first one,
    still to come; None: this replica does not know the task."""
    ti = state.task_instance(key)
    if ti is None:
        return None
    return int(ti.try_number) or attempt_number(ti)


def _finished_in_db(engine: Any, key: TaskKey, try_number: int) -> bool:
    """Has the DB recorded attempt ``try_number`` as past running?"""
    rows = queries.list_task_instances(engine, key.dag_id, key.run_id, task_id=key.task_id)
    return any(
        row.try_number == try_number and row.state not in UNFINISHED_ATTEMPT_STATES for row in rows
    )
