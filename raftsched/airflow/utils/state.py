"""``airflow.utils.state``: ``DagRunState``, ``TaskInstanceState`` and ``State``, the names
Airflow DAG files use for ``allowed_states``/``failed_states`` (``TriggerDagRunOperator``,
``ExternalTaskSensor``). Members are strings (``DagRunState.SUCCESS == "success"``).

Airflow's task states raftsched has no use for (``restarting``, ``removed``,
``up_for_reschedule``, ``scheduled``) are still spelled here, so a file that names one
imports; a wait on such a state simply never sees it.
"""

from __future__ import annotations

from enum import StrEnum


class DagRunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"


class TaskInstanceState(StrEnum):
    REMOVED = "removed"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    RESTARTING = "restarting"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    UP_FOR_RESCHEDULE = "up_for_reschedule"
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"
    DEFERRED = "deferred"


class State:
    """Airflow's ``State``: the states by name (``State.SUCCESS``...)."""

    NONE = None
    QUEUED = TaskInstanceState.QUEUED
    RUNNING = TaskInstanceState.RUNNING
    SUCCESS = TaskInstanceState.SUCCESS
    FAILED = TaskInstanceState.FAILED
    UP_FOR_RETRY = TaskInstanceState.UP_FOR_RETRY
    UPSTREAM_FAILED = TaskInstanceState.UPSTREAM_FAILED
    SKIPPED = TaskInstanceState.SKIPPED
    DEFERRED = TaskInstanceState.DEFERRED
    SCHEDULED = TaskInstanceState.SCHEDULED
    REMOVED = TaskInstanceState.REMOVED
    RESTARTING = TaskInstanceState.RESTARTING
    UP_FOR_RESCHEDULE = TaskInstanceState.UP_FOR_RESCHEDULE


__all__ = ["DagRunState", "State", "TaskInstanceState"]
