"""`raftsched dags parse` and `raftsched dags next`, in table and json output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftsched.cli.main import main

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOOD = str(FIXTURES / "dags_good")
WITH_ERRORS = str(FIXTURES / "dags_cli_errors")


def test_parse_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dags", "parse", GOOD]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["DAG_ID", "SCHEDULE", "TIMEZONE", "TASKS", "FILE", "HASH"]
    row = lines[2].split()  # sorted by file: daily_two.py, hourly_berlin.py
    assert row[:4] == ["hourly_berlin", "@hourly", "Europe/Berlin", "1"]
    assert row[4].endswith("hourly_berlin.py") and len(row[5]) == 12


def test_parse_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dags", "parse", GOOD, "--output", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) == {"dags", "errors"}
    assert [d["dag_id"] for d in payload["dags"]] == ["daily_two", "hourly_berlin"]
    assert payload["dags"][0]["schedule"]["cron"] == "0 2 * * *"
    assert payload["errors"] == []


@pytest.mark.parametrize("output", ["table", "json"])
def test_parse_with_errors_exits_1(capsys: pytest.CaptureFixture[str], output: str) -> None:
    assert main(["dags", "parse", WITH_ERRORS, "-o", output]) == 1
    out = capsys.readouterr().out
    if output == "json":
        payload = json.loads(out)
        assert [d["dag_id"] for d in payload["dags"]] == ["daily_two"]
        [error] = payload["errors"]
        assert error["fileloc"].endswith("broken.py")
        assert error["message"] == "RuntimeError: boom"
        assert "Traceback" in error["traceback"]
    else:
        assert "daily_two" in out
        assert "1 file(s) failed to import:" in out
        assert "RuntimeError: boom" in out


def test_parse_missing_folder_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dags", "parse", str(FIXTURES / "no_such_folder")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_parse_defaults_to_config_dags_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "raftsched.cfg"
    config.write_text(f"[core]\ndags_folder = {GOOD}\ndag_file_timeout = 20\n")
    assert main(["--config", str(config), "dags", "parse", "-o", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["dags"]) == 2


def test_next_json_across_berlin_fall_back(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["dags", "next", "daily_two", "--folder", GOOD]
    assert main([*argv, "--after", "2024-10-25T12:00:00+00:00", "-n", "3", "-o", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["timezone"] == "Europe/Berlin"
    slots = payload["slots"]
    assert [s["logical_date_local"] for s in slots] == [
        "2024-10-26T02:00:00+02:00",
        "2024-10-27T02:00:00+02:00",  # once on the fall-back day
        "2024-10-28T02:00:00+01:00",
    ]
    assert [s["logical_date"] for s in slots] == [
        "2024-10-26T00:00:00+00:00",
        "2024-10-27T00:00:00+00:00",
        "2024-10-28T01:00:00+00:00",
    ]
    assert slots[2]["data_interval_start"] == "2024-10-27T00:00:00+00:00"
    assert slots[2]["data_interval_end"] == slots[2]["logical_date"]


def test_next_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["dags", "next", "hourly_berlin", "--folder", GOOD, "--after", "2024-03-31T00:30"]
    assert main([*argv, "-n", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "hourly_berlin: schedule @hourly, time zone Europe/Berlin"
    assert lines[1].split() == ["LOGICAL_DATE", "LOCAL", "INTERVAL_START", "INTERVAL_END"]
    assert lines[2].split()[:2] == ["2024-03-31T01:00:00+00:00", "2024-03-31T03:00:00+02:00"]
    assert lines[3].split()[:2] == ["2024-03-31T02:00:00+00:00", "2024-03-31T04:00:00+02:00"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["dags", "next", "nope", "--folder", GOOD], "DAG 'nope' not found"),
        (["dags", "next", "nope", "--folder", WITH_ERRORS], "files that failed:"),
        (["dags", "next", "daily_two", "--folder", GOOD, "--after", "soon"], "not an ISO-8601"),
        (["dags", "next", "daily_two", "--folder", GOOD, "-n", "0"], "-n must be 1 or more"),
    ],
)
def test_next_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(argv) == 1
    assert message in capsys.readouterr().err


def test_dags_without_subcommand_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dags"]) == 2
    assert "parse" in capsys.readouterr().out


def test_next_shows_a_dst_policy_across_the_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "twice.py").write_text(
        "from datetime import datetime\n"
        "from raftsched import DAG, BashTask\n"
        "with DAG('twice', schedule='0 2 * * *', start_date=datetime(2024, 1, 1),\n"
        "         timezone='Europe/Berlin', dst_repeated='twice', dst_skipped='skip'):\n"
        "    BashTask('a', command='true')\n"
    )
    argv = ["dags", "next", "twice", "--folder", str(tmp_path), "-n", "3", "-o", "json"]
    assert main([*argv, "--after", "2024-10-26T12:00:00+00:00"]) == 0
    local = [s["logical_date_local"] for s in json.loads(capsys.readouterr().out)["slots"]]
    assert local == [
        "2024-10-27T02:00:00+02:00",
        "2024-10-27T02:00:00+01:00",  # the repeated 02:00, twice
        "2024-10-28T02:00:00+01:00",
    ]
    assert main([*argv, "--after", "2024-03-30T12:00:00+00:00"]) == 0
    local = [s["logical_date_local"] for s in json.loads(capsys.readouterr().out)["slots"]]
    assert local[0] == "2024-04-01T02:00:00+02:00"  # 02:00 does not exist on 31 March: skipped
