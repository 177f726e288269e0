"""A DAG's schedule in words beside the raw expression, with its time zone.

``describe(dag)`` answers "At 06:00, Monday through Friday" for a cron schedule (by
``cron-descriptor``, 24-hour clock), "Every 2 hours" for an interval, "" when there is
nothing better to say than the expression itself (manual only, once, an expression the
library cannot read: the page still shows the raw text). The cron it reads is the expanded
one the cluster keeps (``@daily`` -> ``0 0 * * *``); the time zone is the DAG's own.
"""

from __future__ import annotations

import functools
from typing import Any

MAX_CRON = 200  # longer is no cron anyone wrote; never hand it to the parser


def describe(dag: dict[str, Any]) -> str:
    if dag.get("manual_only"):
        return ""
    if dag.get("schedule_kind") == "interval" and dag.get("interval_seconds"):
        return interval_text(dag["interval_seconds"])
    cron = dag.get("cron") or ""
    return cron_text(cron) if dag.get("schedule_kind") == "cron" and cron else ""


@functools.lru_cache(maxsize=512)
def cron_text(expression: str) -> str:
    """The cron expression in English words; "" if it cannot be read."""
    if len(expression) > MAX_CRON:
        return ""
    from cron_descriptor import ExpressionDescriptor

    try:
        return ExpressionDescriptor(expression, use_24hour_time_format=True).get_description()
    except Exception:  # the library raises its own types (FormatException, ...) and others
        return ""


UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def interval_text(seconds: int) -> str:
    """``Every 2 hours``, ``Every 1 day, 6 hours`` (the two largest units)."""
    parts: list[str] = []
    rest = int(seconds)
    for name, size in UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count} {name}{'s' if count != 1 else ''}")
    if not parts:
        return ""
    return "Every " + ", ".join(parts[:2])
