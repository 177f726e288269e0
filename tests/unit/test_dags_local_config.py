"""`dags parse FOLDER` and `dags test --folder` read the config as every other command does,
and no command prints a traceback when whoever reads its output stops reading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raftsched.cli.main import EXIT_BROKEN_PIPE, EXIT_USAGE, main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOOD = str(FIXTURES / "dags_good")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No config but what a test writes: an empty home, no $RAFTSCHED_CONFIG."""
    for name in list(os.environ):
        if name.startswith("RAFTSCHED"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("RAFTSCHED_HOME", str(tmp_path))
    return tmp_path


def catchup_of(out: str, dag_id: str) -> bool:
    return next(d for d in json.loads(out)["dags"] if d["dag_id"] == dag_id)["catchup"]


def test_parse_folder_reads_the_environment_overrides(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dags", "parse", GOOD, "-o", "json"]) == 0
    assert catchup_of(capsys.readouterr().out, "hourly_berlin") is False
    monkeypatch.setenv("RAFTSCHED__SCHEDULER__CATCHUP_BY_DEFAULT", "true")
    assert main(["dags", "parse", GOOD, "-o", "json"]) == 0
    assert catchup_of(capsys.readouterr().out, "hourly_berlin") is True


@pytest.mark.parametrize("where", ["RAFTSCHED_CONFIG", "RAFTSCHED_HOME"])
def test_parse_folder_refuses_an_unknown_key_of_the_found_config(
    clean_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    config = clean_env / "raftsched.cfg"
    config.write_text("[scheduler]\ncatchup_by_defualt = true\n")
    if where == "RAFTSCHED_CONFIG":
        monkeypatch.setenv("RAFTSCHED_HOME", str(clean_env / "elsewhere"))
        monkeypatch.setenv("RAFTSCHED_CONFIG", str(config))
    assert main(["dags", "parse", GOOD]) == EXIT_USAGE
    assert "catchup_by_defualt" in capsys.readouterr().err


def test_dags_test_folder_refuses_an_unknown_key_too(clean_env: Path) -> None:
    (clean_env / "raftsched.cfg").write_text("[core]\nno_such_key = 1\n")
    argv = [sys.executable, "-m", "raftsched", "dags", "test", "daily_two", "--folder", GOOD]
    env = {**os.environ, "RAFTSCHED_HOME": str(clean_env)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert "no_such_key" in done.stderr


def test_a_closed_pipe_ends_the_command_without_a_traceback(clean_env: Path) -> None:
    """`raftsched dags parse -o json | head`: the reader is gone before anything is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # no reader at all: the first write fails, every time
    try:
        done = subprocess.run(
            [sys.executable, "-m", "raftsched", "dags", "parse", GOOD, "-o", "json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "RAFTSCHED_HOME": str(clean_env)},
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == EXIT_BROKEN_PIPE
