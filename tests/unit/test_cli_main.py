from __future__ import annotations

import subprocess
import sys

from raftsched import __version__
from raftsched.cli.main import main
from raftsched.cli.output import render_table


def test_version_flag_prints_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "raftsched", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"raftsched {__version__}"


def test_help_lists_usage() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "raftsched", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert "usage: raftsched" in done.stdout


def test_no_command_is_a_usage_error() -> None:
    assert main([]) == 2


def test_render_table_aligns_and_marks_missing_values() -> None:
    text = render_table([{"a": "x", "b": None}, {"a": "longer", "b": True}], ["a", "b"])
    assert text.splitlines() == ["A       B", "x       -", "longer  yes"]
