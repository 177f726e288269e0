"""The worker's execution path against real processes: one supervisor forks every attempt,
PythonTasks run in forks of a warm per-DAG-file fork server, and nothing outlives its attempt.

- kill -9 of the worker: every attempt's tree dies (bash and warm Python, daemons that left
  the session included), and so do the supervisor and the fork server;
- kill of one attempt, and the end of a task: its daemons die;
- warm PythonTasks: one import of the DAG file for many attempts, a neighbour module, a DAG
  file edited between attempts runs its new code, timeout, output capture, exit codes;
- hostile code sees no secret: task processes and DAG-parse children get the allow-listed
  environment only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from harness import alive, wait_until

from raftsched import taskenv
from raftsched.core.model import TaskKey
from raftsched.dags.parser import parse_file
from raftsched.worker import executor as executor_module
from raftsched.worker.logs import LogBuffer
from raftsched.worker.runner import GUARDED, Attempt
from raftsched.worker.transport import Assignment

pytestmark = [
    pytest.mark.skipif(not GUARDED, reason="the supervisor needs Linux (prctl)"),
    pytest.mark.timeout(60),
]

ROOT = Path(__file__).resolve().parents[2]
KEY = TaskKey("sup", "manual__1", "t")
DAG_HEADER = """\
import os, sys, time
from datetime import datetime
from raftsched.dags.authoring import DAG, PythonTask
"""
DAEMON = """
def spawn_daemon(pid_file):
    # double fork + setsid: the daemon leaves the attempt's session and process group
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            with open(pid_file + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            time.sleep(300)
        os._exit(0)
"""


def python_dag(folder: Path, body: str, name: str = "sup_dag.py") -> Path:
    path = folder / name
    path.write_text(DAG_HEADER + DAEMON + textwrap.dedent(body))
    return path


def py(path: Path, fn: str, **kw: object) -> Assignment:
    return Assignment(
        key=KEY, token=1, try_number=1, kind="python", fileloc=str(path), callable_name=fn, **kw
    )  # type: ignore[arg-type]


def run(assignment: Assignment, **kw: float) -> tuple[object, str, str]:
    buffer = LogBuffer()
    outcome = Attempt(assignment, buffer.write, **kw).run()
    chunks = buffer.take(max_chunks=10_000)
    out = "".join(t for s, t in chunks if s == "stdout")
    err = "".join(t for s, t in chunks if s == "stderr")
    return outcome, out, err


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def kill_pids(*pids: int | None) -> None:
    for pid in pids:
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def children_of(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    return found


def test_kill9_of_the_worker_kills_bash_and_python_attempts_and_their_daemons(
    tmp_path: Path,
) -> None:
    dag = python_dag(
        tmp_path,
        f"""
        def task():
            spawn_daemon({str(tmp_path / "py_daemon")!r})
            with open({str(tmp_path / "py_task")!r}, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(300)
        """,
    )
    script = (
        f"setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {tmp_path}/b.tmp;"
        f" mv {tmp_path}/b.tmp {tmp_path}/bash_daemon; sleep 300 & echo $$ > {tmp_path}/s.tmp;"
        f" mv {tmp_path}/s.tmp {tmp_path}/bash_task; wait"
    )
    worker_code = textwrap.dedent(
        f"""
        import threading, os, time
        from raftsched.core.model import TaskKey
        from raftsched.worker.runner import Attempt
        from raftsched.worker.transport import Assignment
        from raftsched.worker import executor

        key = TaskKey("sup", "manual__1", "t")
        jobs = [
            Assignment(key=key, token=1, try_number=1, kind="bash", command={script!r}),
            Assignment(key=key, token=2, try_number=1, kind="python", fileloc={str(dag)!r},
                       callable_name="task"),
        ]
        threads = [threading.Thread(target=Attempt(a, lambda s, t: None).run) for a in jobs]
        for t in threads:
            t.start()
        while executor.executor().proc is None:
            time.sleep(0.01)
        with open({str(tmp_path / "supervisor")!r}, "w") as f:
            f.write(str(executor.executor().proc.pid))
        for t in threads:
            t.join()
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    worker = subprocess.Popen([sys.executable, "-c", worker_code], env=env)
    names = ("bash_task", "bash_daemon", "py_task", "py_daemon", "supervisor")
    pids: dict[str, int | None] = {}
    try:
        assert wait_until(lambda: all(read_pid(tmp_path / n) for n in names), timeout=30), [
            n for n in names if not read_pid(tmp_path / n)
        ]
        pids = {n: read_pid(tmp_path / n) for n in names}
        forkservers = children_of(pids["supervisor"])  # type: ignore[arg-type]
        assert forkservers, "the Python attempt runs in a fork server, a child of the supervisor"
        everything = [p for p in [*pids.values(), *forkservers] if p]
        assert all(alive(p) for p in everything)
        worker.kill()
        worker.wait(10)
        assert wait_until(lambda: not any(alive(p) for p in everything), timeout=15), {
            p for p in everything if alive(p)
        }
    finally:
        worker.kill()
        worker.wait(10)
        kill_pids(*pids.values(), *(read_pid(tmp_path / n) for n in names))


def test_killing_a_python_attempt_kills_its_daemon_and_the_attempt_ends_killed(
    tmp_path: Path,
) -> None:
    daemon = tmp_path / "daemon"
    dag = python_dag(
        tmp_path,
        f"""
        def task():
            spawn_daemon({str(daemon)!r})
            time.sleep(300)
        """,
    )
    attempt = Attempt(py(dag, "task"), LogBuffer().write)
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(attempt.run()))
    thread.start()
    try:
        assert wait_until(lambda: read_pid(daemon) is not None, timeout=30)
        attempt.kill("killed: lease refused")
        thread.join(15)
        assert not thread.is_alive()
        (outcome,) = result
        assert outcome.killed and outcome.message == "killed: lease refused"  # type: ignore[attr-defined]
        assert wait_until(lambda: not alive(read_pid(daemon)), timeout=10)  # type: ignore[arg-type]
    finally:
        attempt.kill("cleanup")
        thread.join(15)
        kill_pids(read_pid(daemon))


def test_daemons_of_a_python_task_die_when_it_returns(tmp_path: Path) -> None:
    daemon = tmp_path / "daemon"
    dag = python_dag(
        tmp_path,
        f"""
        def task():
            spawn_daemon({str(daemon)!r})
            while not os.path.exists({str(daemon)!r}):
                time.sleep(0.01)
        """,
    )
    try:
        outcome, _, err = run(py(dag, "task"))
        assert outcome.success, err  # type: ignore[attr-defined]
        assert wait_until(lambda: not alive(read_pid(daemon)), timeout=10)  # type: ignore[arg-type]
    finally:
        kill_pids(read_pid(daemon))


def test_warm_python_tasks_import_the_dag_file_once_and_use_its_neighbours(
    tmp_path: Path,
) -> None:
    (tmp_path / "neighbour_mod.py").write_text("GREETING = 'hello from next door'\n")
    imports = tmp_path / "imports"
    dag = python_dag(
        tmp_path,
        f"""
        from neighbour_mod import GREETING
        with open({str(imports)!r}, "a") as f:
            f.write("imported\\n")

        def greet(who):
            import neighbour_mod
            same = neighbour_mod.GREETING == GREETING
            print(GREETING, who, same, os.environ["RAFTSCHED_TRY_NUMBER"])
            print("to stderr", file=sys.stderr)

        def code(n):
            sys.exit(n)

        def boom():
            raise ValueError("boom")
        """,
    )
    for i in range(3):
        outcome, out, err = run(py(dag, "greet", kwargs={"who": f"w{i}"}))
        assert outcome.success, err  # type: ignore[attr-defined]
        assert out == f"hello from next door w{i} True 1\n"
        assert err == "to stderr\n"
    assert imports.read_text() == "imported\n"  # one fork server, three forks of it

    outcome, _, _ = run(py(dag, "code", kwargs={"n": 3}))
    assert (outcome.success, outcome.exit_code) == (False, 3)  # type: ignore[attr-defined]
    outcome, _, err = run(py(dag, "boom"))
    assert (outcome.exit_code, outcome.message) == (1, "ValueError: boom")  # type: ignore[attr-defined]
    assert "Traceback" in err
    assert imports.read_text() == "imported\n"


def test_a_dag_file_edited_between_attempts_runs_its_new_code(tmp_path: Path) -> None:
    def write(version: str) -> Path:
        return python_dag(tmp_path, f"def task():\n    print({version!r})\n", "edited_dag.py")

    dag = write("v1")
    outcome, out, _ = run(py(dag, "task"))
    assert outcome.success and out == "v1\n"  # type: ignore[attr-defined]
    before = dag.stat().st_mtime_ns
    write("v2")
    os.utime(dag, ns=(before + 10**9, before + 10**9))  # a coarse clock: surely newer
    outcome, out, _ = run(py(dag, "task"))
    assert outcome.success and out == "v2\n"  # type: ignore[attr-defined]


def test_a_helper_module_edited_between_attempts_runs_its_new_code(tmp_path: Path) -> None:
    """The DAG file is unchanged; a module beside it that it imports changes: the warm fork
    server is retired and the attempt runs the new code (as a cold import would)."""
    helper = tmp_path / "helper_mod.py"
    helper.write_text("VERSION = 'v1'\n")
    dag = python_dag(
        tmp_path,
        "import helper_mod\n\ndef task():\n    print(helper_mod.VERSION)\n",
        "helper_dag.py",
    )
    outcome, out, _ = run(py(dag, "task"))
    assert outcome.success and out == "v1\n"  # type: ignore[attr-defined]
    before = helper.stat().st_mtime_ns
    helper.write_text("VERSION = 'v2'\n")
    os.utime(helper, ns=(before + 10**9, before + 10**9))
    for _ in range(2):  # the attempt right after the edit, and the one after (a new server)
        outcome, out, _ = run(py(dag, "task"))
        assert outcome.success and out == "v2\n"  # type: ignore[attr-defined]


def test_a_dag_file_that_fails_to_import_fails_its_attempt_with_the_error(
    tmp_path: Path,
) -> None:
    dag = python_dag(tmp_path, "raise RuntimeError('broken at import')\n", "broken_dag.py")
    outcome, _, err = run(py(dag, "task"))
    assert not outcome.success  # type: ignore[attr-defined]
    assert outcome.message == "RuntimeError: broken at import"  # type: ignore[attr-defined]
    assert "Traceback" in err


def test_execution_timeout_ends_a_warm_python_task(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    dag = python_dag(
        tmp_path,
        f"""
        import signal
        def task():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the kill after the grace ends it
            with open({str(pid_file)!r}, "w") as f:
                f.write(str(os.getpid()))
            print("started", flush=True)
            time.sleep(300)
        """,
    )
    began = time.monotonic()
    outcome, out, _ = run(py(dag, "task", execution_timeout=1.0), kill_grace=0.5)
    assert time.monotonic() - began < 20
    assert not outcome.success  # type: ignore[attr-defined]
    assert outcome.message == "execution_timeout of 1s exceeded"  # type: ignore[attr-defined]
    assert out == "started\n"
    assert wait_until(lambda: not alive(read_pid(pid_file)), timeout=10)  # type: ignore[arg-type]


SECRETS = {
    "RAFTSCHED__WORKER__TOKEN": "worker-secret-token",
    "RAFTSCHED__CLUSTER__SECRET": "cluster-secret-value",
    "RAFTSCHED__DATABASE__URL": "postgresql://u:db-password@h/db",
    "RAFTSCHED__API__ADMIN_TOKENS": "admin-secret-token",
    "RAFTSCHED_TOKEN": "cli-secret-token",
    "RAFTSCHED_CONFIG": "/etc/raftsched/secret.cfg",
}


def test_task_processes_see_no_secret_of_the_worker(tmp_path: Path) -> None:
    dag = python_dag(
        tmp_path,
        """
        import json
        def task():
            print(json.dumps(dict(os.environ)))
        """,
    )
    worker_code = textwrap.dedent(
        f"""
        import json
        from raftsched.core.model import TaskKey
        from raftsched.worker.logs import LogBuffer
        from raftsched.worker.runner import Attempt
        from raftsched.worker.transport import Assignment
        from raftsched.worker import executor

        key = TaskKey("sup", "manual__1", "t")
        out = {{}}
        for kind, extra in (("bash", dict(command="env")),
                            ("python", dict(fileloc={str(dag)!r}, callable_name="task"))):
            buffer = LogBuffer()
            a = Assignment(key=key, token=1, try_number=4, kind=kind, env=(("MINE", "yes"),),
                           **extra)
            outcome = Attempt(a, buffer.write).run()
            assert outcome.success, outcome
            out[kind] = "".join(t for s, t in buffer.take(max_chunks=10_000) if s == "stdout")
        with open("/proc/%d/environ" % executor.executor().proc.pid, "rb") as f:
            out["supervisor"] = f.read().decode(errors="replace")
        import ctypes
        dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
        assert dumpable == 0, "the worker's /proc files must be root's: its env holds the token"
        print(json.dumps(out))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), LC_TEST_NAME="kept", NOT_ALLOWED="dropped")
    env.update(SECRETS)
    done = subprocess.run(
        [sys.executable, "-c", worker_code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    python_env = json.loads(seen["python"])
    for where, text in seen.items():
        for name, value in SECRETS.items():
            assert name not in text and value not in text, (where, name)
        assert "NOT_ALLOWED" not in text, where
    assert "LC_TEST_NAME=kept" in seen["bash"] and python_env["LC_TEST_NAME"] == "kept"
    assert "MINE=yes" in seen["bash"] and "RAFTSCHED_TRY_NUMBER=4" in seen["bash"]
    assert python_env["RAFTSCHED_TRY_NUMBER"] == "4" and python_env["PATH"]


def test_an_allow_listed_name_passes_and_a_pattern_never_passes_raftsched_names() -> None:
    env = {"PATH": "/bin", "MY_VAR": "1", "RAFTSCHED__X__Y": "s", "RAFTSCHED_TOKEN": "t"}
    assert taskenv.scrubbed(env, ("PATH", "*")) == {"PATH": "/bin", "MY_VAR": "1"}
    assert taskenv.scrubbed(env, ("RAFTSCHED_TOKEN",)) == {"RAFTSCHED_TOKEN": "t"}
    from raftsched.config import default_config

    assert default_config().worker.task_env_allowlist == taskenv.DEFAULT_ALLOWLIST


def test_a_dag_parse_child_cannot_see_the_cluster_secret_or_the_db_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    seen = tmp_path / "seen.json"
    dag = tmp_path / "snoop_dag.py"
    dag.write_text(f"import json, os\njson.dump(dict(os.environ), open({str(seen)!r}, 'w'))\n")
    parse_file(dag, timeout=30, output_limit=65536)
    env = json.loads(seen.read_text())
    import ctypes

    assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE: /proc/OUR_PID is root's
    assert env.get("PATH")
    assert not set(SECRETS) & set(env)
    assert not any(value in json.dumps(env) for value in SECRETS.values())


def test_the_supervisor_is_started_again_after_it_died(tmp_path: Path) -> None:
    outcome, out, _ = run(
        Assignment(key=KEY, token=1, try_number=1, kind="bash", command="echo one")
    )
    assert outcome.success and out == "one\n"  # type: ignore[attr-defined]
    proc = executor_module.executor().proc
    assert proc is not None
    proc.kill()
    proc.wait(10)
    assert wait_until(lambda: executor_module.executor().supervisor.closed, timeout=10)  # type: ignore[union-attr]
    outcome, out, _ = run(
        Assignment(key=KEY, token=1, try_number=1, kind="bash", command="echo two")
    )
    assert outcome.success and out == "two\n"  # type: ignore[attr-defined]
