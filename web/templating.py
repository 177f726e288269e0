"""Template filters and globals, and a JSON provider that writes datetimes as ISO 8601."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from flask import Flask
from flask.json.provider import DefaultJSONProvider

# Airflow's state colours; templates use the class "state-<state>" (static/style.css).
STATES = (
    "success",
    "running",
    "failed",
    "up_for_retry",
    "upstream_failed",
    "queued",
    "skipped",
    "none",
)


class IsoJSONProvider(DefaultJSONProvider):
    @staticmethod
    def default(o: Any) -> Any:
        if isinstance(o, datetime):
            return o.astimezone(UTC).isoformat()
        if isinstance(o, date):
            return o.isoformat()
        return DefaultJSONProvider.default(o)


def fmt_dt(value: datetime | None, empty: str = "—") -> str:
    if value is None:
        return empty
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def fmt_duration(start: datetime | None, end: datetime | None) -> str:
    if start is None:
        return "—"
    seconds = int(((end or datetime.now(UTC)) - start).total_seconds())
    if seconds < 0:
        return "—"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def init_app(app: Flask) -> None:
    app.json = IsoJSONProvider(app)
    app.jinja_env.filters["dt"] = fmt_dt
    app.jinja_env.filters["duration"] = fmt_duration
    app.jinja_env.globals["STATES"] = STATES
