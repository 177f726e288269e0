"""XCom return values and branching: what a finished attempt hands to the tasks after it.

An attempt's return value (any JSON value, as compact text) travels in the Raft log with its
outcome (``CompleteAttempt.result_json``), is kept on the task instance
(``TaskInstance.result_json``: replicated, in snapshots, so every node has it after a
failover), written to the DB with the attempt's row (``TaskRow.result_json``) and handed to
downstream attempts with their lease (:func:`upstream_results`), so a worker never reads the
DB. ClearTasks drops it with the task.

Bounds (checked before the log, again in ``core.validate``, again here per run):

- one value: at most :data:`MAX_XCOM_BYTES` of UTF-8 JSON, :data:`MAX_XCOM_DEPTH` deep;
- one run: at most :data:`MAX_XCOM_BYTES_PER_RUN` over its tasks' values, so a run's share of
  every node's memory stays bounded. A TaskFlow attempt past it fails with a message saying
  so; a classic PythonTask's value is just not kept (an existing DAG never fails for it).

A ``@task.branch`` attempt also names the task ids to follow (``CompleteAttempt.follow``): its
other *direct* downstream tasks are SKIPPED, and the trigger rules carry the skips on.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from raftsched.core import limits, mapping
from raftsched.core.changes import touch_ti
from raftsched.core.model import TaskInstance, TaskKey, TaskState
from raftsched.core.transitions import set_state, settle
from raftsched.errors import LimitExceeded

if TYPE_CHECKING:
    from raftsched.core.run_table import LiveRun
    from raftsched.core.state import SchedulerState

MAX_XCOM_BYTES = 64 * 1024  # one return value as compact JSON (UTF-8)
MAX_XCOM_BYTES_PER_RUN = 1024 * 1024  # all return values of one run together
MAX_XCOM_DEPTH = limits.MAX_CONF_DEPTH
TASKFLOW_PREFIX = "@taskflow:"  # callable_name of a TaskFlow task: @taskflow:DAG_ID:TASK_ID
XCOM_HINT = (
    "return a small value (an id, a path, a count) and keep bulk data in files or a database"
)


def check_result_json(field: str, text: object) -> str:
    """A return value as JSON text ("" = none): valid JSON, clean, within the bounds."""
    if not isinstance(text, str):
        raise LimitExceeded(field, f"must be JSON text, got {type(text).__name__}")
    if not text:
        return text
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_XCOM_BYTES:
        raise LimitExceeded(
            field,
            f"is {size} bytes as JSON; the limit is {MAX_XCOM_BYTES} bytes ({XCOM_HINT})",
            limit=MAX_XCOM_BYTES,
            size=size,
        )
    limits.check_text(field, text, MAX_XCOM_BYTES)  # no NUL, no invalid UTF-8
    if _depth(text) > MAX_XCOM_DEPTH:
        raise LimitExceeded(field, f"is nested deeper than {MAX_XCOM_DEPTH} levels")
    try:
        value = limits.loads_json(text)
    except (ValueError, RecursionError) as err:
        raise LimitExceeded(field, f"is not valid JSON ({str(err)[:200]})") from None
    # the object walk also refuses NaN, huge integers and unclean strings
    limits.check_json_object(field, {"v": value}, MAX_XCOM_BYTES + 8, MAX_XCOM_DEPTH + 1)
    return text


def check_follow(field: str, follow: object) -> None:
    """None (not a branch) or a tuple of task ids."""
    if follow is None:
        return
    if not isinstance(follow, tuple):
        raise LimitExceeded(field, "must be a tuple of task ids or None")
    limits.check_ids(field, follow, limits.MAX_TASKS_PER_DAG)


def _depth(text: str) -> int:
    return limits._bracket_depth(text)  # one scanner for all JSON texts


def run_total(rec: LiveRun, without: str = "") -> int:
    """Bytes of the run's kept return values (but that of task ``without``)."""
    return sum(
        len(ti.result_json.encode("utf-8", "surrogatepass"))
        for task_id, ti in rec.tis.items()
        if ti.result_json and task_id != without
    )


def outcome_refusal(
    rec: LiveRun, ti: TaskInstance, result_json: str, follow: tuple[str, ...] | None
) -> str:
    """Why a successful attempt's results cannot be kept (the attempt then fails), or ""."""
    task_id = ti.key.task_id
    if result_json and not fits_run(rec, ti, result_json) and is_taskflow(rec, task_id):
        size = len(result_json.encode("utf-8", "surrogatepass"))
        total = run_total(rec, without=task_id) + size
        return (
            f"return value of {size} bytes refused: the run's return values would total"
            f" {total} bytes, past the bound of {MAX_XCOM_BYTES_PER_RUN} per run; {XCOM_HINT}"
        )
    if follow is not None:
        downstream = set(rec.topo.downstream[mapping.task_of(task_id)])
        strangers = sorted(set(follow) - downstream)
        if strangers:
            allowed = ", ".join(sorted(downstream)) or "none"
            return (
                f"branch returned task ids that are not directly downstream of {task_id!r}:"
                f" {', '.join(strangers)[:500]} (directly downstream: {allowed[:500]})"
            )
    return ""


def fits_run(rec: LiveRun, ti: TaskInstance, result_json: str) -> bool:
    size = len(result_json.encode("utf-8", "surrogatepass"))
    return run_total(rec, without=ti.key.task_id) + size <= MAX_XCOM_BYTES_PER_RUN


def is_taskflow(rec: LiveRun, task_id: str) -> bool:
    """A TaskFlow task (its return value is its contract) rather than a classic PythonTask
    (whose value is kept only when it fits: an existing DAG never fails for it)."""
    name = rec.topo.tasks[mapping.task_of(task_id)].callable_name or ""
    return name.startswith(TASKFLOW_PREFIX)


def keep(rec: LiveRun, ti: TaskInstance, result_json: str) -> None:
    """Keep the attempt's return value (the caller touched ``ti``); a classic task's value
    past the run's bound is not kept."""
    fits = bool(result_json) and fits_run(rec, ti, result_json)
    ti.result_json = result_json if fits else None


def drop(state: SchedulerState, ti: TaskInstance) -> None:
    """Forget the task's return value (ClearTasks)."""
    if ti.result_json is not None:
        touch_ti(state, ti)
        ti.result_json = None


def skip_unfollowed(
    state: SchedulerState, rec: LiveRun, ti: TaskInstance, follow: Iterable[str], now: datetime
) -> None:
    """A branch chose ``follow``: its other direct downstream tasks still waiting are
    SKIPPED, and what they decide downstream is settled."""
    chosen = set(follow)
    for task_id in rec.topo.downstream[mapping.task_of(ti.key.task_id)]:
        other = rec.tis[task_id]
        if task_id in chosen or other.state is not TaskState.NONE:
            continue
        touch_ti(state, other)
        other.end_date = now
        other.message = f"skipped: branch {ti.key.task_id!r} did not follow it"
        set_state(state, rec, other, TaskState.SKIPPED)
        settle(state, rec, rec.topo.downstream[task_id], now)


def upstream_results(state: SchedulerState, key: TaskKey) -> dict[str, str]:
    """The return values (JSON text) of the direct upstream tasks of ``key`` that have one:
    what its lease carries to the worker (a mapped upstream's: the list of its instances'
    values, core/mapping.py). A read view: changes nothing."""
    found = state.run_table.find(key)
    if found is None:
        return {}
    rec, _ = found
    out = {}
    for up in rec.topo.upstream.get(mapping.task_of(key.task_id), ()):
        value = mapping.upstream_value(rec, up)
        if value is not None:
            out[up] = value
    return out
