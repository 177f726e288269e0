"""The attempt's fencing token in the Airflow layer's task context (``context["fencing_token"]``,
``get_current_context()``), read from the attempt's environment like the rest of it."""

from __future__ import annotations

from raftsched.airflow import _context


def test_the_context_holds_the_attempts_fencing_token() -> None:
    env = {"RAFTSCHED_DAG_ID": "d", "RAFTSCHED_RUN_ID": "r", "RAFTSCHED_TASK_ID": "t"}
    context = _context.build(None, {**env, "RAFTSCHED_FENCING_TOKEN": "4711"})
    assert context["fencing_token"] == 4711
    assert _context.build(None, env)["fencing_token"] is None  # outside an attempt
