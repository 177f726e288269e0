"""The task runner against real subprocesses: bash and Python tasks, env, exit codes,
execution_timeout over a whole process group, and bounded log shipping of a flood."""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path

import pytest
from harness import alive, wait_until

from raftsched.core.model import TaskKey
from raftsched.worker.logs import LogBuffer, LogShipper
from raftsched.worker.runner import Attempt
from raftsched.worker.transport import Assignment

KEY = TaskKey("etl", "scheduled__2024-01-01T00:00:00+00:00", "extract")


def bash(command: str, **kw: object) -> Assignment:
    return Assignment(key=KEY, token=7, try_number=2, kind="bash", command=command, **kw)  # type: ignore[arg-type]


def run(assignment: Assignment, **kw: float) -> tuple[object, LogBuffer]:
    buffer = LogBuffer()
    outcome = Attempt(assignment, buffer.write, **kw).run()
    return outcome, buffer


def text_of(buffer: LogBuffer, stream: str) -> str:
    return "".join(t for s, t in buffer.take(max_chunks=10_000) if s == stream)


def test_bash_task_output_is_captured_in_chunks() -> None:
    outcome, buffer = run(bash("echo hello; echo oops >&2; echo bye"))
    assert outcome.success and outcome.exit_code == 0
    chunks = buffer.take()
    assert all(len(text.encode()) <= buffer.chunk_bytes for _, text in chunks)
    assert "".join(t for s, t in chunks if s == "stdout") == "hello\nbye\n"
    assert "".join(t for s, t in chunks if s == "stderr") == "oops\n"


def test_task_env_and_raftsched_variables_are_set() -> None:
    a = bash(
        'echo "$GREETING|$RAFTSCHED_DAG_ID|$RAFTSCHED_RUN_ID|$RAFTSCHED_TASK_ID'
        "|$RAFTSCHED_TRY_NUMBER|$RAFTSCHED_LOGICAL_DATE|$RAFTSCHED_DATA_INTERVAL_START"
        '|$RAFTSCHED_DATA_INTERVAL_END"; echo "$RAFTSCHED_CONF"; echo "$PATH"',
        env=(("GREETING", "hi"),),
        logical_date="2024-01-01T00:00:00+00:00",
        data_interval_start="2024-01-01T00:00:00+00:00",
        data_interval_end="2024-01-02T00:00:00+00:00",
        conf={"rows": 3},
    )
    outcome, buffer = run(a)
    assert outcome.success
    first, conf, path = text_of(buffer, "stdout").splitlines()
    assert first.split("|") == [
        "hi",
        "etl",
        KEY.run_id,
        "extract",
        "2",
        "2024-01-01T00:00:00+00:00",
        "2024-01-01T00:00:00+00:00",
        "2024-01-02T00:00:00+00:00",
    ]
    assert json.loads(conf) == {"rows": 3}
    assert path  # the worker's environment is kept underneath


def test_python_task_imports_the_dag_file_and_calls_the_function(tmp_path: Path) -> None:
    (tmp_path / "helper_mod.py").write_text("PREFIX = 'total'\n")
    dag_file = tmp_path / "report_dag.py"
    dag_file.write_text(
        textwrap.dedent(
            """
            import os
            from datetime import datetime, timezone

            from helper_mod import PREFIX
            from raftsched.dags.authoring import DAG, PythonTask

            def report(numbers, scale=1):
                print(PREFIX, sum(numbers) * scale, os.environ["RAFTSCHED_TASK_ID"])

            class Jobs:
                @staticmethod
                def fail(reason):
                    raise ValueError(reason)

            with DAG("report", schedule=None, start_date=datetime(2024, 1, 1, tzinfo=timezone.utc)):
                PythonTask("report", fn=report, kwargs={"numbers": [1, 2, 3], "scale": 10})
            """
        )
    )
    ok = Assignment(
        key=TaskKey("report", "manual__1", "report"),
        token=3,
        try_number=1,
        kind="python",
        callable_name="report",
        kwargs={"numbers": [1, 2, 3], "scale": 10},
        fileloc=str(dag_file),
    )
    outcome, buffer = run(ok)
    assert outcome.success, (outcome, text_of(buffer, "stderr"))
    assert text_of(buffer, "stdout") == "total 60 report\n"

    failing = Assignment(
        key=ok.key,
        token=4,
        try_number=2,
        kind="python",
        callable_name="Jobs.fail",
        kwargs={"reason": "no rows today"},
        fileloc=str(dag_file),
    )
    outcome, buffer = run(failing)
    assert not outcome.success and outcome.exit_code == 1
    assert outcome.message == "ValueError: no rows today"
    assert "Traceback" in text_of(buffer, "stderr")


def test_python_task_with_a_missing_function_fails_clearly(tmp_path: Path) -> None:
    dag_file = tmp_path / "empty_dag.py"
    dag_file.write_text("X = 1\n")
    a = Assignment(
        key=KEY, token=1, try_number=1, kind="python", callable_name="nope", fileloc=str(dag_file)
    )
    outcome, _ = run(a)
    assert not outcome.success
    assert "'nope' is not a callable module-level name" in outcome.message


def test_non_zero_exit_fails_with_exit_code_and_last_stderr_line() -> None:
    outcome, _ = run(bash("echo starting; echo 'warn: 1' >&2; echo 'error: disk full' >&2; exit 3"))
    assert not outcome.success
    assert outcome.exit_code == 3
    assert outcome.message == "error: disk full"

    outcome, _ = run(bash("exit 4"))
    assert (outcome.success, outcome.exit_code, outcome.message) == (False, 4, "exit code 4")


def test_execution_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The child ignores SIGTERM, so only the SIGKILL after the grace can end it.
    a = bash(
        f"(trap '' TERM; sleep 1000) & echo $! > {pids}.tmp; echo $$ >> {pids}.tmp;"
        f" mv {pids}.tmp {pids}; wait",
        execution_timeout=1.0,
    )
    outcome, _ = run(a, kill_grace=0.5)
    assert not outcome.success
    assert outcome.message == "execution_timeout of 1s exceeded"
    child, shell = (int(p) for p in pids.read_text().split())
    assert wait_until(lambda: not alive(child) and not alive(shell))


def test_leftover_background_processes_are_killed_when_the_task_exits(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    outcome, _ = run(bash(f"sleep 1000 >/dev/null 2>&1 & echo $! > {pid_file}; exit 0"))
    assert outcome.success
    assert wait_until(lambda: not alive(int(pid_file.read_text())))


def test_kill_takes_the_group_at_once_and_marks_the_outcome(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    attempt = Attempt(bash(f"sleep 1000 & touch {ready}; wait"), LogBuffer().write)
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(attempt.run()))
    thread.start()
    assert wait_until(ready.exists)
    attempt.kill("killed: lease refused")
    thread.join(10)
    assert not thread.is_alive()
    (outcome,) = result
    assert outcome.killed and outcome.message == "killed: lease refused"  # type: ignore[attr-defined]


class SlowTransport:
    """append_logs blocks until released: a cluster slower than the task's output."""

    def __init__(self) -> None:
        self.chunks: list[tuple[str, str]] = []
        self.gate = threading.Event()

    def append_logs(self, key: TaskKey, token: int, chunks: list[tuple[str, str]]) -> bool:
        self.gate.wait(30)
        self.chunks.extend(chunks)
        return True


@pytest.mark.timeout(60)
def test_a_flood_of_output_is_chunked_with_bounded_memory() -> None:
    transport = SlowTransport()
    buffer = LogBuffer(max_bytes=256 * 1024, chunk_bytes=16 * 1024)
    shipper = LogShipper(transport, KEY, 7, buffer, flush_interval=0.05).start()  # type: ignore[arg-type]
    # ~20 MB of numbered lines, then a last line that must survive.
    a = bash("seq 1 2500000; echo the-end")
    outcome = Attempt(a, buffer.write).run()
    assert outcome.success
    transport.gate.set()
    shipper.close(timeout=30)
    assert buffer.peak_bytes <= buffer.max_bytes
    assert buffer.dropped_total > 10_000_000
    assert all(len(text.encode()) <= buffer.chunk_bytes for _, text in transport.chunks)
    shipped = "".join(text for _, text in transport.chunks)
    assert "bytes dropped]\n" in shipped
    assert shipped.endswith("2500000\nthe-end\n")
