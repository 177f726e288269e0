"""Template filters and globals, and a JSON provider that writes datetimes as ISO 8601."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote

from flask import Flask, g, url_for
from flask.json.provider import DefaultJSONProvider

from raftsched import __version__

# Airflow's state colours; templates use the class "state-<state>" (static/style.css).
STATES = (
    "success",
    "running",
    "failed",
    "up_for_retry",
    "upstream_failed",
    "queued",
    "skipped",
    "deferred",  # waits on a trigger, holding no worker slot
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


_SAFE = "!$&'()*+,/:;=@"  # what werkzeug's converters leave unquoted in a path part
_HOLE = "RaftschedHole{}X"  # a placeholder url_for passes through unchanged


@functools.lru_cache(maxsize=8192)
def quote_part(value: str) -> str:
    """A path part quoted as werkzeug's converters quote it (ids repeat on every page)."""
    return quote(value, safe=_SAFE)


def link_maker(endpoint: str, *names: str) -> Callable[..., str] | None:
    """A function of ``names``' values (in that order) returning ``url_for(endpoint,
    name=value, ...)``, by string joins: a DAG list page links every row 4-14 times, and
    url_for (werkzeug's URL builder) was a quarter of the page's CPU. The pattern comes from
    one url_for per request (so script root and host are as url_for has them); values are
    quoted as werkzeug's converters quote them. None when a value would not go into the
    path (a query-string argument): use url_for then."""
    cache: dict[tuple[str, tuple[str, ...]], Any] = g.setdefault("_link_makers", {})
    key = (endpoint, names)
    if key in cache:
        return cache[key]
    holes = [_HOLE.format(i) for i in range(len(names))]
    pattern = url_for(endpoint, **dict(zip(names, holes, strict=True)))
    maker = None
    if "?" not in pattern and all(pattern.count(h) == 1 for h in holes):
        # Split the pattern at the holes, in the order they appear in it.
        order = sorted(range(len(names)), key=lambda i: pattern.index(holes[i]))
        parts, rest = [], pattern
        for i in order:
            head, _, rest = rest.partition(holes[i])
            parts.append(head)
        parts.append(rest)

        def maker(*values: Any) -> str:
            out = [parts[0]]
            for n, i in enumerate(order):
                out += (quote_part(str(values[i])), parts[n + 1])
            return "".join(out)

    cache[key] = maker
    return maker


def path_url(endpoint: str, **values: Any) -> str:
    """``url_for(endpoint, **values)`` through :func:`link_maker` (for templates)."""
    names = tuple(values)
    maker = link_maker(endpoint, *names)
    if maker is None:
        return url_for(endpoint, **values)
    return maker(*values.values())


def init_app(app: Flask) -> None:
    app.json = IsoJSONProvider(app)
    app.jinja_env.globals["path_url"] = path_url
    app.jinja_env.filters["dt"] = fmt_dt
    app.jinja_env.filters["duration"] = fmt_duration
    app.jinja_env.globals["STATES"] = STATES
    # The footer's version: this webserver's own (raftsched.__version__, the one place).
    app.jinja_env.globals["raftsched_version"] = __version__
