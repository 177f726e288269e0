"""Deferring a task: ``raise TaskDeferred(trigger, method_name, kwargs, timeout)`` (or
``defer(...)``) inside a Python task ends its attempt waiting on ``trigger``; its worker slot
is freed and the task is DEFERRED until a triggerer process sees the trigger fire
(docs/architecture.md §17). Then a new attempt calls ``method_name`` (a module-level
function of the DAG file) with ``kwargs`` and ``event=`` the trigger's event.

The built-in triggers are described here by what they are (a kind and JSON arguments);
``raftsched.triggerer.triggers`` runs them. A trigger's arguments travel through the Raft
log, so they are small JSON values, bounded by the cluster (16 KiB).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

# The kwargs key under which the worker hands a resumed attempt its trigger's event.
RESUME_KEY = "__raftsched_resume__"
MIN_POKE_INTERVAL = 1.0  # seconds: a trigger polling faster is refused (poke_interval)


class BaseTrigger:
    """What a deferred task waits on: ``kind`` names how the triggerer runs it."""

    kind = ""

    def args(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class DateTimeTrigger(BaseTrigger):
    """Fires at ``moment`` (an aware datetime) with the moment's ISO text as its event."""

    moment: datetime
    kind = "time"

    def args(self) -> dict[str, Any]:
        if self.moment.tzinfo is None:
            raise ValueError("DateTimeTrigger needs an aware datetime (tzinfo set)")
        return {"moment": self.moment.astimezone(UTC).isoformat()}


def TimeDeltaTrigger(delta: timedelta) -> DateTimeTrigger:
    """Fires ``delta`` after the deferral (the moment is fixed when the task defers)."""
    return DateTimeTrigger(datetime.now(UTC) + delta)


@dataclass(frozen=True)
class FileTrigger(BaseTrigger):
    """Fires once a file exists at ``filepath`` (a local path on the triggerer's host); with
    ``stable_for`` > 0, once its size has not changed for that many seconds. The event is
    ``{"path": ..., "size": ...}``."""

    filepath: str
    poke_interval: float = 1.0
    stable_for: float = 0.0
    kind = "file"

    def args(self) -> dict[str, Any]:
        if self.poke_interval < MIN_POKE_INTERVAL:
            raise ValueError(f"poke_interval must be at least {MIN_POKE_INTERVAL} s")
        return {
            "filepath": str(self.filepath),
            "poke_interval": float(self.poke_interval),
            "stable_for": float(self.stable_for),
        }


@dataclass(frozen=True)
class HttpTrigger(BaseTrigger):
    """Fires once a request to ``url`` answers ``status`` (and, when given, a body holding
    ``body_contains``), polled every ``poke_interval`` seconds from the triggerer. The event
    is ``{"status": ..., "body": <its first 4 KiB>}``."""

    url: str
    method: str = "GET"
    status: int = 200
    body_contains: str = ""
    poke_interval: float = 5.0
    kind = "http"

    def args(self) -> dict[str, Any]:
        if self.poke_interval < MIN_POKE_INTERVAL:
            raise ValueError(f"poke_interval must be at least {MIN_POKE_INTERVAL} s")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http:// or https://, got {self.url[:100]!r}")
        return {
            "url": self.url,
            "method": self.method.upper(),
            "status": int(self.status),
            "body_contains": self.body_contains,
            "poke_interval": float(self.poke_interval),
        }


@dataclass(frozen=True)
class SqlTrigger(BaseTrigger):
    """Fires once ``sql`` returns a row on the database of connection ``conn_id`` (a
    raftsched connection the task declares: the triggerer fetches it under the trigger's
    lease, as a worker does for its attempt), polled every ``poke_interval`` seconds; with
    ``first_cell_truthy``, once that row's first cell is also truthy (Airflow's SqlSensor).
    The event is ``{"row": [...]}``."""

    conn_id: str
    sql: str
    parameters: dict[str, Any] = field(default_factory=dict)
    poke_interval: float = 5.0
    first_cell_truthy: bool = False
    kind = "sql"

    def args(self) -> dict[str, Any]:
        from raftsched.dags.sql_check import check_sql
        from raftsched.secrets import check_key

        if self.poke_interval < MIN_POKE_INTERVAL:
            raise ValueError(f"poke_interval must be at least {MIN_POKE_INTERVAL} s")
        return {
            "conn_id": check_key(self.conn_id),
            "sql": check_sql(self.sql),
            "parameters": dict(self.parameters or {}),
            "poke_interval": float(self.poke_interval),
            "first_cell_truthy": bool(self.first_cell_truthy),
        }


@dataclass(frozen=True)
class ExternalStateTrigger(BaseTrigger):
    """Fires once the run of DAG ``dag_id`` at ``logical_date`` (an aware datetime) reached
    one of ``allowed_states``: the run itself, or with ``task_ids`` each of those tasks. It
    raises (the waiting task fails) once the run or any of the tasks is in one of
    ``failed_states``; it fires with ``"outcome": "__skipped__"`` once one is in
    ``skipped_states``. The triggerer asks the cluster every ``poke_interval`` seconds. The
    event is ``{"state": ..., "states": {task_id: state}}``."""

    dag_id: str
    logical_date: datetime
    task_ids: tuple[str, ...] = ()
    allowed_states: tuple[str, ...] = ("success",)
    failed_states: tuple[str, ...] = ()
    skipped_states: tuple[str, ...] = ()
    poke_interval: float = 5.0
    kind = "external"

    def args(self) -> dict[str, Any]:
        if self.poke_interval < MIN_POKE_INTERVAL:
            raise ValueError(f"poke_interval must be at least {MIN_POKE_INTERVAL} s")
        if self.logical_date.tzinfo is None:
            raise ValueError("ExternalStateTrigger needs an aware logical_date (tzinfo set)")
        if not self.allowed_states:
            raise ValueError("allowed_states must name at least one state")
        return {
            "dag_id": str(self.dag_id),
            "logical_date": self.logical_date.astimezone(UTC).isoformat(),
            "task_ids": [str(t) for t in self.task_ids],
            "allowed_states": [str(s).lower() for s in self.allowed_states],
            "failed_states": [str(s).lower() for s in self.failed_states],
            "skipped_states": [str(s).lower() for s in self.skipped_states],
            "poke_interval": float(self.poke_interval),
        }


@dataclass
class TaskDeferred(Exception):
    """Raised by a task to defer (Airflow: ``TaskDeferred``)."""

    trigger: BaseTrigger
    method_name: str = "execute_complete"
    kwargs: dict[str, Any] = field(default_factory=dict)
    timeout: timedelta | float | None = None

    def __post_init__(self) -> None:
        super().__init__(f"deferred on a {self.trigger.kind} trigger")

    def to_dict(self) -> dict[str, Any]:
        """What the result file carries to the worker (checked again by the cluster)."""
        timeout = self.timeout
        if isinstance(timeout, timedelta):
            timeout = timeout.total_seconds()
        return {
            "kind": self.trigger.kind,
            "args_json": json.dumps(self.trigger.args(), sort_keys=True),
            "method_name": self.method_name,
            "kwargs_json": json.dumps(self.kwargs or {}, sort_keys=True),
            "timeout_seconds": None if timeout is None else float(timeout),
        }


def defer(
    trigger: BaseTrigger,
    method_name: str = "execute_complete",
    kwargs: dict[str, Any] | None = None,
    timeout: timedelta | float | None = None,
) -> None:
    """End this attempt waiting on ``trigger`` (raises :class:`TaskDeferred`)."""
    raise TaskDeferred(trigger, method_name, dict(kwargs or {}), timeout)
