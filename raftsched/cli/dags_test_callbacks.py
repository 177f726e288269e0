"""The callbacks of ``raftsched dags test``: run here, at once, as a worker would run them.

A task's ``on_retry_callback`` after a failed try with tries left, ``on_failure_callback``
after its last, ``on_success_callback`` after a success; the DAG's own when the run ends
(a deadline is not watched: the test runs as fast as it can). Each runs as a Python attempt
(``worker.callback_runner.callback_assignment``) with the context dict the cluster would
give, its output prefixed with ``[task:on_<event>_callback]``. A notifier's connection comes
from this shell (``RAFTSCHED_SECRET_CONN_<ID>``) or the callback is skipped, saying so. A
callback's outcome never changes the test's exit code (as in the cluster).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any


def task_callbacks(
    spec: Any, task: Any, run: dict[str, Any], try_number: int, outcome: Any
) -> None:
    """Run ``task``'s callbacks for the attempt that ended with ``outcome``."""
    if outcome.success:
        if getattr(outcome, "skipped", False):
            return
        event, state = "success", "success"
    elif try_number <= task.retries:
        event, state = "retry", "up_for_retry"
    else:
        event, state = "failure", "failed"
    message = "" if outcome.success else outcome.message
    context = {
        **run,
        "event": event,
        "task_id": task.task_id,
        "try_number": try_number,
        "max_tries": task.retries + 1,
        "state": state,
        "exit_code": outcome.exit_code,
        "message": message,
        "exception": message or None,
    }
    _run(spec, task.callbacks, event, context, task.task_id, try_number)


def run_ended(spec: Any, run: dict[str, Any], ok: bool, states: dict[str, str]) -> None:
    """Run the DAG's run-level callbacks: the run succeeded (``ok``) or failed."""
    event = "success" if ok else "failure"
    failed = sorted(t for t, state in states.items() if state == "failed")
    message = "" if ok else f"task(s) failed: {', '.join(failed)}" if failed else "the run failed"
    context = {
        **run,
        "event": event,
        "task_id": None,
        "try_number": None,
        "state": "success" if ok else "failed",
        "message": message,
        "exception": message or None,
    }
    _run(spec, spec.callbacks, event, context, "__callbacks__", 1)


def run_context(
    spec: Any,
    run_id: str,
    logical: datetime,
    start: datetime,
    end: datetime,
    conf: dict[str, Any],
) -> dict[str, Any]:
    return {
        "dag_id": spec.dag_id,
        "run_id": run_id,
        "logical_date": logical.astimezone(UTC).isoformat(),
        "data_interval_start": start.astimezone(UTC).isoformat(),
        "data_interval_end": end.astimezone(UTC).isoformat(),
        "run_type": "manual",
        "conf": conf,
    }


def _run(
    spec: Any, callbacks: Any, event: str, context: dict[str, Any], where: str, try_number: int
) -> None:
    from raftsched.core.callbacks import declared_connection
    from raftsched.core.model import TaskKey
    from raftsched.secrets import EnvSecretsBackend, conn_env
    from raftsched.worker.callback_runner import callback_assignment
    from raftsched.worker.runner import Attempt

    for _, ref, kwargs_json in (cb for cb in callbacks if cb[0] == event):
        label = f"{where}:on_{event}_callback"
        job = SimpleNamespace(callable=ref, kwargs_json=kwargs_json, fileloc=spec.fileloc)
        key = TaskKey(spec.dag_id, context["run_id"], where)
        a = callback_assignment(key, 0, try_number, job, {**context, "callback": ref})
        conn_id = declared_connection(kwargs_json)
        if conn_id:
            value = EnvSecretsBackend().get("connection", conn_id)
            if value is None:
                print(
                    f"--- {label} {ref}: skipped: export RAFTSCHED_SECRET_CONN_{conn_id} to"
                    " run it here (dags test never asks a cluster)",
                    flush=True,
                )
                continue
            a = replace(a, secret_env=((conn_env(conn_id), value),))
        print(f"--- {label} {ref}", flush=True)
        printer = _Printer(label)
        outcome = Attempt(a, printer).run()
        printer.flush()
        verdict = "succeeded" if outcome.success else f"failed: {outcome.message}"
        print(f"--- {label} {ref} {verdict}", flush=True)


class _Printer:
    """Prints whole lines of a callback's output, prefixed with its label (a process
    writes a line in pieces; they are joined here)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.partial = {"stdout": "", "stderr": ""}

    def __call__(self, stream: str, text: str) -> None:
        *lines, self.partial[stream] = (self.partial.get(stream, "") + text).split("\n")
        for line in lines:
            self._print(stream, line)

    def flush(self) -> None:
        for stream, rest in self.partial.items():
            if rest:
                self._print(stream, rest)
        self.partial = {"stdout": "", "stderr": ""}

    def _print(self, stream: str, line: str) -> None:
        out = sys.stderr if stream == "stderr" else sys.stdout
        print(f"[{self.label}] {line}", file=out, flush=True)
