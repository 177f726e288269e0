"""`raftsched standalone`: home preparation, then a smoke test of the real thing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa
from harness import child_env, free_ports, wait_for
from sqlalchemy.pool import NullPool

from raftsched.cli.standalone_cmd import Layout, copy_examples, node_addresses, prepare_home


def test_first_run_writes_config_and_examples_and_never_overwrites(tmp_path: Path) -> None:
    layout = Layout.under(tmp_path / "home")
    created = prepare_home(layout, node_addresses(3, 7101))
    assert created and layout.config_path.exists()
    text = layout.config_path.read_text()
    assert "nodes = 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103" in text
    secret = re.search(r"^secret = (\S+)$", text, re.M)
    assert secret and len(secret.group(1)) >= 32
    assert layout.config_path.stat().st_mode & 0o077 == 0  # the secret is readable by us only

    other = Layout.under(tmp_path / "other")
    prepare_home(other, node_addresses(3, 7101))
    assert other.config_path.read_text() != text  # a fresh secret per home

    layout.config_path.write_text(text + "\n# mine\n")
    assert prepare_home(layout, node_addresses(5, 9000)) == []
    assert layout.config_path.read_text().endswith("# mine\n")

    dags = tmp_path / "home" / "dags"
    assert copy_examples(dags) >= 1
    names = sorted(p.name for p in dags.iterdir())
    assert "__init__.py" not in names
    (dags / names[0]).write_text("# edited by the user\n")
    assert copy_examples(dags) == 0  # not empty: left alone
    assert (dags / names[0]).read_text() == "# edited by the user\n"

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "my_dag.py").write_text("# mine\n")
    assert copy_examples(mine) == 0
    assert [p.name for p in mine.iterdir()] == ["my_dag.py"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_standalone_smoke(tmp_path: Path) -> None:
    home = tmp_path / "home"
    base = free_ports(1, offsets=(0, 1, 2, 100, 101, 102, 200, 201, 202))[0]
    web_port = free_ports(1, offsets=(0, 1, 2))[0]
    out_path = tmp_path / "standalone.out"
    env = child_env()
    config = home / "raftsched.cfg"
    cli = [sys.executable, "-m", "raftsched", "--config", str(config)]
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [
                *cli[:3],
                "standalone",
                "--home",
                str(home),
                "--base-port",
                str(base),
                "--web-port",
                str(web_port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    pids: list[int] = []
    try:

        def output() -> str:
            return out_path.read_text(errors="replace")

        banner = wait_for(
            lambda: "press Ctrl-C" in output() and output(),
            timeout=60,
            what="the standalone banner",
            describe=lambda: output()[-2000:],
        )
        pids = [int(pid) for pid in re.findall(r"\bpid (\d+)", banner)]
        assert len(pids) >= 3, banner
        assert str(home / "dags") in banner and str(config) in banner

        def status() -> dict | None:  # type: ignore[type-arg]
            done = subprocess.run(
                [*cli, "cluster", "status", "--output", "json"],
                capture_output=True,
                text=True,
                env=env,
                timeout=30,
                check=False,
            )
            if done.returncode != 0:
                return None
            payload = json.loads(done.stdout)
            return payload if payload.get("leader") else None

        wait_for(
            status,
            timeout=90,
            what="`cluster status` to show a leader",
            interval=0.5,
            describe=lambda: output()[-2000:],
        )

        engine = sa.create_engine(f"sqlite:///{home / 'raftsched.db'}", poolclass=NullPool)

        def example_runs() -> int:
            try:
                with engine.connect() as conn:
                    return conn.execute(sa.text("SELECT count(*) FROM dag_run")).scalar_one()
            except sa.exc.OperationalError:
                return 0

        wait_for(example_runs, timeout=90, what="example DAG runs in the DB", interval=0.5)

        # The worker runs the example DAGs to green (the flaky example may still be retrying).
        def runs_by_state() -> dict[str, int]:
            with engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT state, count(*) FROM dag_run GROUP BY state"))
                return {state: count for state, count in rows}

        wait_for(
            lambda: runs_by_state().get("success", 0) >= 2,
            timeout=120,
            what="two example runs to succeed",
            interval=1.0,
            describe=lambda: str(runs_by_state()),
        )
        assert runs_by_state().get("failed", 0) == 0, runs_by_state()
        engine.dispose()

        # The web UI answers through its front door (nginx when installed), with a leader.
        assert f"web UI:  http://127.0.0.1:{web_port}" in banner, banner
        password_file = home / "admin-password.txt"
        assert password_file.stat().st_mode & 0o077 == 0 and password_file.read_text().strip()

        def web_health() -> bool:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{web_port}/health", timeout=5
                ) as response:
                    return response.status == 200
            except OSError:
                return False

        wait_for(web_health, timeout=60, what="the web UI's /health to answer 200", interval=0.5)

        # The authoring examples run on the cluster: TaskFlow, params and templates, and the
        # connection that standalone adds for example_connections (it fetches /health).
        # example_mapping maps a task over 1,000 items of an upstream's return value.
        authoring = ("example_taskflow", "example_params", "example_connections", "example_mapping")

        def triggered(dag_id: str) -> bool:
            done = subprocess.run(
                [*cli, "dags", "trigger", dag_id],
                capture_output=True,
                env=env,
                timeout=30,
                check=False,
            )
            return done.returncode == 0

        for dag_id in authoring:
            wait_for(lambda d=dag_id: triggered(d), timeout=90, what=f"{dag_id} to be triggered")

        def authoring_states() -> dict[str, str]:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.text("SELECT dag_id, state FROM dag_run WHERE run_type = 'manual'")
                )
                return {dag_id: state for dag_id, state in rows if dag_id in authoring}

        wait_for(
            lambda: (
                set(authoring_states().values()) == {"success"}
                and len(authoring_states()) == len(authoring)
            ),
            timeout=120,
            what="the TaskFlow, params, connection and mapping examples to succeed",
            interval=1.0,
            describe=lambda: str(authoring_states()),
        )
        engine.dispose()

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, output()[-3000:]
        for pid in pids:
            wait_for(lambda pid=pid: not _alive(pid), timeout=10, what=f"pid {pid} to be gone")
    except BaseException:
        print(out_path.read_text(errors="replace")[-4000:], file=sys.stderr)
        for log in sorted((home / "logs").glob("*.log")):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            print(f"===== {log} =====\n{tail}", file=sys.stderr)
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
