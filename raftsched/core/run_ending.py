"""Ending a DAG's active runs (scheduled or manual: Temporal's ends whatever runs) for the
overlap policies ``cancel_other`` and ``terminate_other`` (``core/slot_policy.py``), inside
the apply of the decision that starts the next slot, so no failover can separate the two.

- *terminate*: every unfinished task instance of the run becomes FAILED now; a running
  attempt's lease is revoked (``task_queue.fence``), so its worker's next heartbeat is refused
  and the worker kills it (invariant 2). The run settles FAILED in the same apply.
- *cancel*: tasks that have not started become FAILED now; a running attempt is left to end,
  without a retry after it; the run ends with its last attempt, and the next slot's run waits
  for that (Temporal waits for a cancelled workflow to close before it starts the next).

A run ended this way is not a failure for ``pause_on_failure`` (Temporal: neither is a
cancelled or terminated workflow): their task instances' message
(``transitions.ENDED_MESSAGE``) tells them apart.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from raftsched.core import snapshot as sn
from raftsched.core.changes import touch_run, touch_ti
from raftsched.core.model import FINISHED_RUN_STATES, FINISHED_TASK_STATES, TaskState
from raftsched.core.run_table import LiveRun
from raftsched.core.transitions import ENDED_MESSAGE, set_state, settle_run

if TYPE_CHECKING:
    from raftsched.core.state import SchedulerState

CANCEL = "cancel"
TERMINATE = "terminate"
ENDINGS = frozenset({CANCEL, TERMINATE})


def end_active_runs(state: SchedulerState, dag_id: str, how: str, now: datetime) -> int:
    """End (``how``: CANCEL or TERMINATE) the DAG's active runs; how many runs
    changed (0: nothing left to end)."""
    changed = 0
    for rec in list(state.run_table.records(dag_id)):
        run = rec.run
        if run.state in FINISHED_RUN_STATES:
            continue
        if _end(state, rec, how == TERMINATE, now):
            changed += 1
            touch_run(state, rec)
            settle_run(state, rec, now)
    return changed


def _end(state: SchedulerState, rec: LiveRun, kill: bool, now: datetime) -> bool:
    changed = False
    for ti in rec.tis.values():
        if ti.state in FINISHED_TASK_STATES:
            continue
        if ti.state is TaskState.RUNNING and not kill:
            if ti.max_tries > ti.try_number:  # no retry after the attempt that runs
                touch_ti(state, ti)
                ti.max_tries = ti.try_number
                changed = True
            continue
        touch_ti(state, ti)
        if ti.state is TaskState.RUNNING:
            state.task_queue.fence(ti)  # not leased again until the revoked lease has ended
        if ti.state not in sn.ATTEMPT_STATES:  # ending stands in for the coming attempt
            ti.try_number += 1
            ti.start_date = ti.worker_id = ti.lease_token = ti.exit_code = None
        ti.end_date, ti.next_retry_at = now, None
        ti.message = ENDED_MESSAGE
        set_state(state, rec, ti, TaskState.FAILED)  # revokes a live lease
        changed = True
    return changed
