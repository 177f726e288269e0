"""Callbacks and deadlines as a DAG file writes them, turned into spec entries.

``on_failure_callback`` / ``on_success_callback`` / ``on_retry_callback`` (tasks; the first
two on DAGs too) take a module-level function of the DAG file (called ``fn(context)`` on a
worker), a built-in notifier (:mod:`raftsched.notifiers`), or a list of them. A DAG's
``deadline`` (a timedelta, or a :class:`DeadlineAlert`) with ``on_deadline_callback`` alerts
when a run is not done by its logical date plus the deadline. Each becomes an
``(event, callable, settings JSON)`` entry of the spec (``core/callbacks.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from raftsched.core import callbacks as cb
from raftsched.errors import DagDefinitionError
from raftsched.notifiers import Notifier

TASK_CALLBACKS = {
    "on_failure_callback": "failure",
    "on_success_callback": "success",
    "on_retry_callback": "retry",
}
Entry = tuple[str, str, str]


class DeadlineReference:
    """What a deadline counts from (Airflow 3's names); raftsched knows the logical date."""

    DAGRUN_LOGICAL_DATE = "dagrun_logical_date"


@dataclass(frozen=True)
class DeadlineAlert:
    """``DAG(deadline=DeadlineAlert(interval=timedelta(minutes=30), callback=notify))``: the
    run should be done ``interval`` after its logical date; else ``callback`` runs once."""

    interval: timedelta
    callback: Any
    reference: str = DeadlineReference.DAGRUN_LOGICAL_DATE


def entries(event: str, value: Any, *, what: str, dag_id: str, task_id: str | None) -> list[Entry]:
    """The spec entries of one callback option (None: none)."""
    task_id = task_id or ""
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    out = []
    for item in items:
        if isinstance(item, Notifier):
            settings = json.dumps(item.settings, sort_keys=True, separators=(",", ":"))
            out.append((event, item.ref, settings))
        elif callable(item) and hasattr(item, "__qualname__"):
            name = item.__qualname__
            if "<lambda>" in name or "<locals>" in name:
                raise DagDefinitionError(
                    f"{what} is {'a lambda' if '<lambda>' in name else 'a nested function'}"
                    f" ({name}); a worker imports the DAG file and looks the callback up by"
                    " name, so define it with `def` at module level",
                    dag_id=dag_id,
                    task_id=task_id,
                )
            out.append((event, name, "{}"))
        else:
            raise DagDefinitionError(
                f"{what} must be a module-level function or a notifier (raftsched.notifiers),"
                f" got {type(item).__name__}",
                dag_id=dag_id,
                task_id=task_id,
            )
    return out


def task_callbacks(
    options: Mapping[str, Any], defaults: Mapping[str, Any], *, dag_id: str, task_id: str
) -> tuple[Entry, ...]:
    """A task's callbacks: its own options, else the DAG's ``default_args`` ones."""
    unknown = sorted(set(options) - set(TASK_CALLBACKS))
    if unknown:
        raise DagDefinitionError(
            f"task {task_id!r} got unexpected keyword argument(s) {', '.join(unknown)}",
            dag_id=dag_id,
            task_id=task_id,
        )
    out: list[Entry] = []
    for option, event in TASK_CALLBACKS.items():
        value = options.get(option, defaults.get(option))
        what = f"{option} of task {task_id!r}"
        out += entries(event, value, what=what, dag_id=dag_id, task_id=task_id)
    return tuple(out)


def dag_callbacks(
    *,
    dag_id: str,
    on_failure_callback: Any,
    on_success_callback: Any,
    deadline: timedelta | DeadlineAlert | None,
    on_deadline_callback: Any,
    on_skipped_callback: Any = None,
) -> tuple[tuple[Entry, ...], float | None]:
    """A DAG's run-level callbacks (and "skipped": a schedule policy skipped slots) and its
    deadline in seconds (None: none)."""
    out: list[Entry] = []
    pairs = (
        ("failure", on_failure_callback),
        ("success", on_success_callback),
        ("skipped", on_skipped_callback),
    )
    for event, value in pairs:
        what = f"on_{event}_callback of DAG {dag_id!r}"
        out += entries(event, value, what=what, dag_id=dag_id, task_id=None)
    if isinstance(deadline, DeadlineAlert):
        if deadline.reference != DeadlineReference.DAGRUN_LOGICAL_DATE:
            raise DagDefinitionError(
                f"deadline of DAG {dag_id!r}: only DeadlineReference.DAGRUN_LOGICAL_DATE is"
                " supported",
                dag_id=dag_id,
            )
        on_deadline_callback = on_deadline_callback or deadline.callback
        deadline = deadline.interval
    if deadline is None:
        if on_deadline_callback is not None:
            raise DagDefinitionError(
                f"DAG {dag_id!r} has on_deadline_callback but no deadline", dag_id=dag_id
            )
        return tuple(out), None
    if not isinstance(deadline, timedelta) or deadline.total_seconds() < 1:
        raise DagDefinitionError(
            f"deadline of DAG {dag_id!r} must be a timedelta of at least 1 second, got"
            f" {deadline!r}",
            dag_id=dag_id,
        )
    what = f"on_deadline_callback of DAG {dag_id!r}"
    alerts = entries("deadline", on_deadline_callback, what=what, dag_id=dag_id, task_id=None)
    if not alerts:
        raise DagDefinitionError(
            f"DAG {dag_id!r} has a deadline but nothing to call when it passes: add"
            " on_deadline_callback= (a function or a notifier)",
            dag_id=dag_id,
        )
    if len(out) + len(alerts) > cb.MAX_CALLBACKS:
        raise DagDefinitionError(
            f"DAG {dag_id!r} has more than {cb.MAX_CALLBACKS} callbacks", dag_id=dag_id
        )
    return tuple(out + alerts), deadline.total_seconds()
