"""The one logging set-up (raftsched/logging_setup.py): the JSON formatter, the context filter
(node id and Raft term from process-global providers), task fields passed with ``extra=``,
and gunicorn's logconfig_dict."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Iterator

import pytest

from raftsched import logging_setup as ls
from raftsched.core.model import TaskKey


@pytest.fixture(autouse=True)
def _clean_context() -> Iterator[None]:
    ls.set_node_id(None)  # other tests in this process may have started a node runtime
    ls.set_term_provider(None)
    yield
    ls.set_node_id(None)
    ls.set_term_provider(None)


def _logger(log_format: str) -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(ls.make_formatter(log_format))
    handler.addFilter(ls.ContextFilter())
    logger = logging.getLogger(f"test.logging_setup.{log_format}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, out


def test_json_lines_carry_the_base_keys_node_and_term() -> None:
    logger, out = _logger("json")
    logger.info("before the node exists")
    ls.set_node_id("10.0.0.1:7101")
    term = [3]
    ls.set_term_provider(lambda: term[0])
    logger.warning("leader loop started (term %d)", 3)
    term[0] = 4
    logger.info("later")
    first, second, third = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["node"] is None and first["term"] is None
    assert second == {
        "ts": second["ts"],
        "level": "WARNING",
        "logger": "test.logging_setup.json",
        "message": "leader loop started (term 3)",
        "node": "10.0.0.1:7101",
        "term": 3,
        "thread": second["thread"],
    }
    assert second["ts"].endswith("Z") and "T" in second["ts"]
    assert third["term"] == 4


def test_task_fields_from_extra_and_a_traceback_stay_on_one_line() -> None:
    logger, out = _logger("json")
    key = TaskKey("etl", "scheduled__2026-01-01T00:00:00+00:00", "load")
    logger.info("start", extra=ls.task_context(key, 2, request_id="req-1"))
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        logger.exception("failed", extra={"dag_id": "etl"})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    start, failed = (json.loads(line) for line in lines)
    assert start["dag_id"] == "etl" and start["task_id"] == "load"
    assert start["run_id"] == key.run_id and start["try_number"] == 2
    assert start["request_id"] == "req-1"
    assert "ValueError: boom" in failed["exc"] and failed["level"] == "ERROR"


def test_a_failing_term_provider_costs_the_term_not_the_line() -> None:
    logger, out = _logger("json")

    def broken() -> int:
        raise RuntimeError("node torn down")

    ls.set_term_provider(broken)
    logger.info("still logged")
    assert json.loads(out.getvalue())["term"] is None


def test_text_format_is_the_classic_line() -> None:
    logger, out = _logger("text")
    logger.info("hello %s", "world")
    line = out.getvalue().strip()
    assert line.endswith("INFO test.logging_setup.text [MainThread] hello world")


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log format"):
        ls.make_formatter("xml")


def test_gunicorn_logconfig_is_a_valid_dictconfig_with_json_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = ls.gunicorn_logconfig("INFO", "json")
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        logging.config.dictConfig(config)
        ls.set_node_id("webserver 0.0.0.0:8080")
        logging.getLogger("gunicorn.error").info("Booting worker")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
        logging.getLogger("gunicorn.error").handlers[:] = []
        logging.getLogger("gunicorn.access").handlers[:] = []
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["message"] == "Booting worker" and line["node"] == "webserver 0.0.0.0:8080"
