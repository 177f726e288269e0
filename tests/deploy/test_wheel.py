"""The README's install from a wheel works: `python -m build` makes the sdist and the wheel, and
the wheel alone, installed into a fresh virtualenv (no checkout on its path, its dependencies
from PyPI or pip's cache), runs `raftsched --version`, a scheduler node (one-node cluster on
loopback, SQLite) and a worker, which run a triggered DAG to success.

One test, so the build and the install are paid once (about 20 s of the suite; the README's
"Installing" section has the measured figure). It is what catches a module, template or
migration left out of the wheel, a dependency the code imports but pyproject does not
declare (the fresh venv has only what the wheel asks for), and a version that disagrees.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftsched import __version__

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from harness import config_text, free_ports, wait_for

ROOT = Path(__file__).resolve().parents[2]
# What the sdist is built from: the files of a checkout that the build reads.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "raftsched", "web")

DAG = """\
from pathlib import Path

from raftsched import DAG, BashTask, PythonTask

OUT = Path({out!r})


def write() -> None:
    (OUT / "python.done").write_text("ok")


with DAG("wheel_check", schedule=None):
    BashTask("bash", command="echo from-the-wheel > {out}/bash.done") >> PythonTask("py", fn=write)
"""


def clean_env(home: Path) -> dict[str, str]:
    """The test's environment without anything that would point at the checkout or another
    cluster: no PYTHONPATH, no RAFTSCHED_* settings, no venv of the test run."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAFTSCHED", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(RAFTSCHED_HOME=str(home), RAFTSCHED_SEEN_INDEX_FILE="", PYTHONUNBUFFERED="1")
    return env


def run(argv: list[str], env: dict[str, str], timeout: float = 120) -> str:
    # cwd: the home, not the checkout, which `python -c` would put on sys.path
    cwd = env.get("RAFTSCHED_HOME")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout


def build(tmp_path: Path) -> tuple[Path, Path]:
    """sdist and wheel of a copy of the sources (the checkout stays as it is)."""
    src = tmp_path / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)], clean_env(src), 240)
    [sdist] = dist.glob("raftsched-*.tar.gz")
    [wheel] = dist.glob("raftsched-*-py3-none-any.whl")
    return sdist, wheel


@contextlib.contextmanager
def started(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=env["RAFTSCHED_HOME"],
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def status(admin_port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/status", timeout=1) as r:
            return json.load(r)
    except OSError:
        return None


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_wheel_installs_into_a_fresh_venv_and_runs_a_node_and_a_worker(
    tmp_path: Path,
) -> None:
    sdist, wheel = build(tmp_path)
    assert sdist.name == f"raftsched-{__version__}.tar.gz"
    assert wheel.name == f"raftsched-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as whl:
        files = set(whl.namelist())
    for needed in (
        "raftsched/web/templates/base.html",
        "raftsched/web/static/style.css",
        "raftsched/store/migrations/env.py",
        "raftsched/store/migrations/script.py.mako",
        "raftsched/example_dags/etl_minutely.py",
        "raftsched/py.typed",
    ):
        assert needed in files, needed
    with tarfile.open(sdist) as tar:
        assert f"raftsched-{__version__}/LICENSE" in tar.getnames()

    venv = tmp_path / "venv"
    home = tmp_path / "home"
    (home / "dags").mkdir(parents=True)
    env = clean_env(home)
    run([sys.executable, "-m", "venv", str(venv)], env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", "--quiet", str(wheel)], env, 300)
    raftsched = str(venv / "bin" / "raftsched")
    assert run([raftsched, "--version"], env).strip() == f"raftsched {__version__}"
    where = run(
        [str(venv / "bin" / "python"), "-c", "import raftsched; print(raftsched.__file__)"], env
    )
    assert Path(where.strip()).is_relative_to(venv), f"imported from {where}: not the wheel's"

    [port] = free_ports(1)
    config = home / "raftsched.cfg"
    config.write_text(
        config_text(
            {
                "core": {"dags_folder": home / "dags", "load_examples": "false"},
                "database": {"url": f"sqlite:///{home / 'raftsched.db'}"},
                "cluster": {"nodes": f"127.0.0.1:{port}", "data_dir": home / "data"},
                "scheduler": {"min_file_process_interval": 2},
            }
        )
    )
    (home / "dags" / "wheel_check.py").write_text(DAG.format(out=str(home)))
    cli = [raftsched, "--config", str(config)]
    run([*cli, "db", "migrate"], env)
    node_argv = [*cli, "scheduler", "--address", f"127.0.0.1:{port}"]
    with (
        started(node_argv, env, home / "node.log") as node,
        started([*cli, "worker"], env, home / "worker.log") as worker,
    ):
        try:
            up = wait_for(
                lambda: (s := status(port + 100)) and s.get("role") == "leader" and s,
                timeout=60,
                what="the node to lead its one-node cluster",
            )
            assert up["version"] == __version__
            trigger = [*cli, "dags", "trigger", "wheel_check", "--output", "json"]
            wait_for(  # the DAG registers after the leader's first parse
                lambda: (
                    subprocess.run(trigger, capture_output=True, env=env, timeout=60).returncode
                    == 0
                ),
                timeout=90,
                interval=1,
                what="the DAG to be registered and triggered",
            )
            wait_for(
                lambda: (home / "python.done").exists(),
                timeout=90,
                interval=0.5,
                what="both tasks to run on the worker",
            )
            assert (home / "bash.done").read_text().strip() == "from-the-wheel"
            succeeded = [*cli, "runs", "list", "wheel_check", "--state", "success", "-o", "json"]
            wait_for(
                lambda: json.loads(run(succeeded, env))["runs"],
                timeout=60,
                interval=1,
                what="the run to succeed",
            )
        except BaseException:
            for name in ("node.log", "worker.log"):
                print(f"--- {name}\n{(home / name).read_text(errors='replace')[-4000:]}")
            raise
        assert node.poll() is None and worker.poll() is None
