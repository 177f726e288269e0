from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from raftsched import __version__
from raftsched.cli.connect import add_connection_flags
from raftsched.cli.main import hoist_connection_flags, main, parse_args
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


# -- global flags on either side of the subcommand ------------------------------------------


def shown(argv: list[str]) -> dict[str, object]:
    args = parse_args(argv)
    keys = ("config", "server", "token", "output", "consistent", "timeout")
    return {key: getattr(args, key) for key in keys if hasattr(args, key)}


CONNECTED = {
    "config": "c.cfg",
    "server": "h:7301",
    "token": "t",
    "output": "json",
    "consistent": True,
    "timeout": 3.0,
}


@pytest.mark.parametrize(
    "argv",
    [
        # every flag before the subcommand
        ["--config", "c.cfg", "--server", "h:7301", "--token", "t", "-o", "json",
         "--consistent", "--timeout", "3", "dags", "list"],
        # every flag after it
        ["dags", "list", "--config", "c.cfg", "--server", "h:7301", "--token", "t",
         "--output", "json", "--consistent", "--timeout", "3"],
        # mixed, with attached values
        ["--server=h:7301", "-ojson", "dags", "list", "--config=c.cfg", "--token=t",
         "--consistent", "--timeout=3"],
    ],
)  # fmt: skip
def test_global_flags_on_either_side(argv: list[str]) -> None:
    assert shown(argv) == CONNECTED


def test_flags_before_a_command_with_positionals() -> None:
    args = parse_args(
        ["-o", "json", "--consistent", "tasks", "mark", "etl", "r1", "a", "b", "--state", "failed"]
    )
    assert (args.consistent, args.output, args.dag_id, args.task_ids) == (
        True,
        "json",
        "etl",
        ["a", "b"],
    )


def test_config_after_long_running_commands() -> None:
    assert parse_args(["scheduler", "--config", "c.cfg", "--address", "h:7101"]).config == "c.cfg"
    args = parse_args(["worker", "--config", "c.cfg", "--token", "t"])
    assert (args.config, args.token) == ("c.cfg", "t")
    assert parse_args(["--token", "t", "worker"]).token == "t"
    assert parse_args(["db", "migrate"]).config is None


def test_a_later_config_wins_and_an_unset_one_stays_unset() -> None:
    assert parse_args(["--config", "a.cfg", "dags", "list", "--config", "b.cfg"]).config == "b.cfg"
    assert parse_args(["--config", "a.cfg", "db", "migrate"]).config == "a.cfg"


def test_a_command_without_connection_flags_still_refuses_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--server", "h:7301", "db", "migrate"])
    assert exc.value.code == 2
    assert "--server" in capsys.readouterr().err


def test_hoisting_leaves_everything_else_alone() -> None:
    assert hoist_connection_flags(["--config", "-o", "dags", "list"]) == [
        "--config", "-o", "dags", "list",
    ]  # fmt: skip
    assert hoist_connection_flags(["dags", "list", "--server", "x"]) == [
        "dags", "list", "--server", "x",
    ]  # fmt: skip
    assert hoist_connection_flags(["--token", "t", "dags", "x", "--", "y"]) == [
        "dags", "x", "--token", "t", "--", "y",
    ]  # fmt: skip


def test_every_connection_flag_is_hoisted() -> None:
    """A flag added to add_connection_flags later (as --consistent was) works before the
    subcommand without touching main.py."""
    probe = argparse.ArgumentParser(add_help=False)
    add_connection_flags(probe)
    flags = {o: a.nargs != 0 for a in probe._actions for o in a.option_strings}
    assert {"--server", "--token", "--timeout", "--consistent", "--output", "-o"} <= set(flags)
    for flag, takes_value in flags.items():
        argv = [flag, "v"] if takes_value else [flag]
        assert hoist_connection_flags([*argv, "dags", "list"]) == ["dags", "list", *argv]
