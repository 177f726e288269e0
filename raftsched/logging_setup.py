"""One logging set-up for every raftsched process: ``[core] logging_level`` and ``log_format``.

``setup_logging(level, log_format)`` installs one stderr handler on the root logger (unless
logging is set up already: tests, embedding). ``text`` (the default) is the classic line::

    2026-12-01 16:41:30,806 INFO raftsched.cluster.leader [leader-loop] leader loop started

``json`` writes one JSON object per line, for log shippers::

    {"ts": "2026-12-01T16:41:30.806Z", "level": "INFO", "logger": "raftsched.cluster.leader",
     "message": "leader loop started (term 1)", "node": "10.0.0.1:7101", "term": 1,
     "thread": "leader-loop"}

Every JSON line carries ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, ``node``
and ``term``: ``node`` is the process's identity (a scheduler node's Raft address, a worker's
id, ``webserver <bind>``), ``term`` the node's current Raft term; both are null where the
process has none. They come from process-global providers (:func:`set_node_id`,
:func:`set_term_provider`) that the runtime sets; :class:`ContextFilter` adds them to every
record. Where a call site knows them it passes ``dag_id``, ``run_id``, ``task_id``,
``try_number``, ``request_id`` (and ``worker_id``) with ``extra=``; they appear as keys of
their own. A traceback goes in ``exc``.

gunicorn (the webserver) configures logging itself: :func:`gunicorn_logconfig` is the
``logconfig_dict`` that gives its error and access logs, and the app's, the same format.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"
# Record attributes a call site may pass with ``extra=``; JSON shows each under its own key.
CONTEXT_KEYS = ("dag_id", "run_id", "task_id", "try_number", "request_id", "worker_id")

_lock = threading.Lock()
_node_id: str | None = None
_term_provider: Callable[[], int | None] | None = None


def set_node_id(node_id: str | None) -> None:
    """This process's identity in every log line (``node``)."""
    global _node_id
    with _lock:
        _node_id = node_id


def set_term_provider(provider: Callable[[], int | None] | None) -> None:
    """A cheap function answering the current Raft term (``term``), or None to clear it."""
    global _term_provider
    with _lock:
        _term_provider = provider


def current_context() -> tuple[str | None, int | None]:
    """(node id, term) now; the term is None when unknown or its provider fails."""
    node_id, provider = _node_id, _term_provider
    term = None
    if provider is not None:
        try:
            value = provider()
            term = None if value is None else int(value)
        except Exception:  # a node being torn down: no term rather than no log line
            term = None
    return node_id, term


class ContextFilter(logging.Filter):
    """Adds ``node_id`` and ``term`` to every record (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        node_id, term = current_context()
        if not hasattr(record, "node_id"):
            record.node_id = node_id
        if not hasattr(record, "term"):
            record.term = term
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line; see the module docstring for its keys."""

    def format(self, record: logging.LogRecord) -> str:
        node_id, term = (
            (record.node_id, record.term)  # type: ignore[attr-defined]
            if hasattr(record, "node_id") and hasattr(record, "term")
            else current_context()
        )
        ts = datetime.fromtimestamp(record.created, UTC)
        out: dict[str, Any] = {
            "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "node": node_id,
            "term": term,
            "thread": record.threadName,
        }
        for key in CONTEXT_KEYS:
            value = getattr(record, key, None)
            if value is not None and value != "":
                out[key] = value if isinstance(value, (int, float, bool)) else str(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def make_formatter(log_format: str) -> logging.Formatter:
    if log_format == "json":
        return JsonFormatter()
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"unknown log format {log_format!r}; expected one of {LOG_FORMATS}")


def setup_logging(level: str, log_format: str = "text", *, node_id: str | None = None) -> None:
    """Log to stderr in ``log_format`` at ``level``, unless logging is set up already (then
    only ``node_id`` is recorded)."""
    if node_id is not None:
        set_node_id(node_id)
    formatter = make_formatter(log_format)  # an unknown format fails even when set up
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(ContextFilter())
    root.addHandler(handler)
    root.setLevel(level)


def register_stack_dump() -> None:
    """``kill -USR1 PID`` prints every thread's stack to stderr (the process log): how an
    operator, or the partition suite, sees where a process that stopped making progress waits.
    Scheduler nodes only: a worker's attempt guards use SIGUSR1 as their death signal."""
    if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError, RuntimeError):
            faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)


def gunicorn_logconfig(level: str, log_format: str) -> dict[str, Any]:
    """gunicorn's ``logconfig_dict``: its error and access logs and the app's root logger on
    stderr/stdout in ``log_format``."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"} if log_format == "json" else {"format": TEXT_FORMAT}
    )
    handler = {"formatter": "raftsched", "filters": ["context"]}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"raftsched": formatter},
        "filters": {"context": {"()": f"{__name__}.ContextFilter"}},
        "handlers": {
            "error": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                **handler,
            },
            "access": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stdout",
                **handler,
            },
        },
        "root": {"level": level, "handlers": ["error"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["error"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["access"], "propagate": False},
        },
    }


def task_context(key: Any, try_number: int | None = None, **more: Any) -> dict[str, Any]:
    """``extra=`` for a log line about one task (attempt): dag_id, run_id, task_id, ..."""
    out: dict[str, Any] = {
        "dag_id": getattr(key, "dag_id", None),
        "run_id": getattr(key, "run_id", None),
        "task_id": getattr(key, "task_id", None),
    }
    if try_number is not None:
        out["try_number"] = try_number
    out.update(more)
    return out
