"""What an attempt hands back, against real task processes (``runner.Attempt``, which is what a
worker runs per attempt): a return value that holds a secret the attempt was given leaves
the worker masked; a result file replaced by something hostile fails that attempt with a
message saying what it is, and the next attempt of the same process runs as usual."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from raftsched import secrets as sx
from raftsched.core.model import TaskKey
from raftsched.worker.logs import LogBuffer
from raftsched.worker.runner import Attempt, Outcome
from raftsched.worker.transport import Assignment

TOKEN = "tok-3f9a1c77e2"
PASSWORD = "pw-8d1e55a0"
HOOK = "hook-0b7c42d9aa"
URI = f"https://bot:{PASSWORD}@hooks.example/services/T0/{HOOK}?api_key=key-5e6f7a8b"

DAG_FILE = """
import json
import os

from raftsched.secrets import get_connection, get_variable


def give_back():
    conn = get_connection("hook")
    print("printing", get_variable("TOKEN"))
    return {
        "token": get_variable("TOKEN"),
        "sentence": f"the password is {conn.password}!",
        conn.schema.rsplit("/", 1)[-1]: [conn.extra.split("=", 1)[1], 1, True],
    }


def fail_saying():
    raise RuntimeError("bad token " + get_variable("TOKEN"))


def hostile(kind):
    path = os.environ["RAFTSCHED_RESULT_FILE"]
    if kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "sparse":
        with open(path, "wb") as out:
            out.truncate(8 << 30)
    elif kind == "directory":
        os.mkdir(path)
    os._exit(0)  # as a task that writes no result itself: what it made stays


def plain():
    return {"n": 3}
"""


@pytest.fixture
def dag_file(tmp_path: Path) -> Path:
    path = tmp_path / "results_dag.py"
    path.write_text(textwrap.dedent(DAG_FILE))
    return path


def _python(dag_file: Path, name: str, **kw: object) -> Assignment:
    return Assignment(
        key=TaskKey("results", "manual__1", name),
        token=5,
        try_number=1,
        kind="python",
        callable_name=name,
        fileloc=str(dag_file),
        **kw,  # type: ignore[arg-type]
    )


def _run(a: Assignment) -> tuple[Outcome, str]:
    buffer = LogBuffer()
    outcome = Attempt(a, buffer.write).run()
    return outcome, "".join(text for _, text in buffer.take(max_chunks=10_000))


SECRETS = (
    (sx.var_env("TOKEN"), TOKEN),
    (sx.conn_env("hook"), URI),
)


def test_a_return_value_leaves_the_worker_masked(dag_file: Path) -> None:
    outcome, log = _run(_python(dag_file, "give_back", secret_env=SECRETS))
    assert outcome.success, (outcome, log)
    assert json.loads(outcome.result_json) == {
        "token": "***",
        "sentence": "the password is ***!",
        "***": ["***", 1, True],  # a key too: the webhook's token, the query's api_key
    }
    assert "printing ***" in log
    failed, log = _run(_python(dag_file, "fail_saying", secret_env=SECRETS))
    assert not failed.success and failed.message == "RuntimeError: bad token ***"
    for text in (outcome.result_json, failed.message, log):
        for secret in (TOKEN, PASSWORD, HOOK, "key-5e6f7a8b"):
            assert secret not in text


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("dev-zero", "the result file is not a regular file (it is a symbolic link)"),
        ("fifo", "the result file is not a regular file (it is a FIFO)"),
        ("sparse", "the result file is too large: 8589934592 bytes"),
        ("directory", "the result file is not a regular file (it is a directory)"),
    ],
)
def test_a_hostile_result_file_fails_its_attempt_only(dag_file: Path, kind: str, said: str) -> None:
    outcome, log = _run(_python(dag_file, "hostile", kwargs={"kind": kind}))
    assert not outcome.success and outcome.exit_code == 0, (outcome, log)
    assert outcome.message.startswith(said), outcome.message
    after, log = _run(_python(dag_file, "plain"))  # the same process runs the next one
    assert after.success and after.result_json == '{"n":3}', (after, log)
