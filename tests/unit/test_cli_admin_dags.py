"""`raftsched dags list|show|pause|unpause|trigger|errors` against a real gRPC server with
canned data, in both output modes, with their exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_cli_admin_support import FakeCluster, dead_address, fake_cluster, isolate

from raftsched.cli.main import main


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    isolate(monkeypatch, tmp_path)
    with fake_cluster(tmp_path) as cluster:
        yield cluster


def test_list_table_follows_pages(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("dags", "list", token="viewer")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "DAG_ID", "PAUSED", "SCHEDULE", "TIMEZONE", "NEXT_RUN", "LAST_RUN", "TASKS",
    ]  # fmt: skip
    assert lines[1].split() == [
        "etl", "no", "@daily", "Europe/Paris", "2024-01-02T00:00:00+00:00", "success",
        "2024-01-01T00:00:00+00:00", "2",
    ]  # fmt: skip
    assert lines[2].split()[:2] == ["report", "yes"]
    assert len(lines) == 3  # the fake serves one DAG a page


def test_list_json_and_filters(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    argv = fake.argv("dags", "list", "--search", "e", "--tag", "team-a", "--paused", output="json")
    assert main([*argv, "--include-inactive"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["total_size"] == 2
    etl = payload["dags"][0]
    assert etl["schedule"] == {
        "kind": "cron",
        "cron": "0 0 * * *",
        "interval_seconds": 0,
        "display": "@daily",
    }
    assert etl["recent_runs"][0]["state"] == "success"
    assert etl["recent_runs"][0]["run_type"] is None  # UNSPECIFIED
    assert etl["start_date"] is None
    request = fake.dags.requests[0]
    assert request.search == "e" and list(request.tags) == ["team-a"]
    assert request.HasField("paused") and request.paused is True
    assert request.include_inactive is True


def test_list_unpaused_filter(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("dags", "list", "--unpaused")) == 0
    capsys.readouterr()
    assert fake.dags.requests[0].paused is False
    assert main(fake.argv("dags", "list")) == 0
    assert not fake.dags.requests[-1].HasField("paused")


def test_show_table(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("dags", "show", "etl")) == 0
    out = capsys.readouterr().out
    assert "schedule           @daily" in out
    assert "file               /dags/etl.py" in out
    assert "load     python  0        all_success   extract" in out
    assert "extract  bash    2        -             -" in out
    assert "scheduled__2024-01-01  success  2024-01-01T00:00:00+00:00" in out


def test_show_json(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("dags", "show", "etl", output="json")) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["dag"]["dag_id"] == "etl"
    assert [t["task_id"] for t in payload["tasks"]] == ["extract", "load"]
    assert payload["tasks"][0]["env"] == {} and payload["tasks"][0]["retries"] == 2
    assert payload["tasks"][1]["execution_timeout_seconds"] is None


@pytest.mark.parametrize("output", ["table", "json"])
def test_unknown_dag_exits_1_naming_the_way_out(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    assert main(fake.argv("dags", "show", "nope", output=output)) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "raftsched: error: dag 'nope' not found: `raftsched dags list` shows the known DAGs\n"
    )


@pytest.mark.parametrize("output", ["table", "json"])
def test_pause_and_unpause(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    results = []
    for words in (("pause", "etl"), ("pause", "etl"), ("unpause", "etl")):
        assert main(fake.argv("dags", *words, token="operator", output=output)) == 0
        results.append(capsys.readouterr().out)
    if output == "json":
        assert [json.loads(r) for r in results] == [
            {"dag_id": "etl", "paused": True, "changed": True},
            {"dag_id": "etl", "paused": True, "changed": False},
            {"dag_id": "etl", "paused": False, "changed": True},
        ]
    else:
        assert results == [
            "dag 'etl' paused\n",
            "dag 'etl' was already paused\n",
            "dag 'etl' unpaused\n",
        ]
    assert all(request.request_id for request in fake.dags.requests)


def test_pause_needs_operator(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("dags", "pause", "etl", token="viewer")) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "raftsched: error: `raftsched dags pause` needs role operator; use a token with that role"
    )


def test_pause_when_cluster_has_no_quorum_exits_3(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.dags.unavailable = True
    argv = fake.argv("dags", "pause", "etl")
    argv[argv.index("--timeout") + 1] = "0.5"
    assert main(argv) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert "no quorum: 1 of 3 nodes reachable" in line


def test_pause_with_cluster_down_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dags", "pause", "etl", "--server", dead_address(), "--timeout", "0.5"]) == 3
    assert "no raftsched node could serve PauseDag" in capsys.readouterr().err


@pytest.mark.parametrize("output", ["table", "json"])
def test_trigger(fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str) -> None:
    argv = fake.argv(
        "dags", "trigger", "etl", "--conf", '{"day": 1}', "--logical-date", "2024-05-01T12:00",
        "--run-id", "mine", output=output,
    )  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    if output == "json":
        run = json.loads(out)["run"]
        assert run["run_id"] == "mine" and run["state"] == "queued" and run["run_type"] == "manual"
        assert run["conf_json"] == '{"day": 1}'
    else:
        assert out == "triggered etl run mine (logical date 2024-05-01T12:00:00+00:00)\n"
    [request] = fake.dags.requests
    assert request.conf_json == '{"day": 1}'
    assert request.logical_date.ToDatetime(tzinfo=UTC) == datetime(2024, 5, 1, 12, tzinfo=UTC)


def test_trigger_defaults(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("dags", "trigger", "etl")) == 0
    assert "triggered etl run manual__x" in capsys.readouterr().out
    [request] = fake.dags.requests
    assert request.conf_json == "" and not request.HasField("logical_date")


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--conf", "{not json", "argument --conf: not valid JSON: Expecting property name"),
        ("--conf", "[1, 2]", "argument --conf: expected a JSON object"),
        ("--logical-date", "tomorrow", "argument --logical-date: 'tomorrow' is not an ISO-8601"),
    ],
)
def test_trigger_checks_its_input_before_calling(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(fake.argv("dags", "trigger", "etl", flag, value))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert fake.dags.requests == []


def test_trigger_taken_run_exits_1(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("dags", "trigger", "etl", "--run-id", "taken")) == 1
    assert capsys.readouterr().err == (
        "raftsched: error: run 'taken' of DAG 'etl' already exists:"
        " pass another --run-id or --logical-date\n"
    )


@pytest.mark.parametrize("output", ["table", "json"])
def test_errors(fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str) -> None:
    assert main(fake.argv("dags", "errors", token="viewer", output=output)) == 0
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out) == {
            "import_errors": [
                {"fileloc": "/dags/broken.py", "message": "SyntaxError: oops", "traceback": "..."}
            ]
        }
    else:
        assert out.splitlines() == [
            "FILELOC          MESSAGE",
            "/dags/broken.py  SyntaxError: oops",
        ]


def test_pause_sends_its_note_and_show_lists_policies_notes_and_skipped_slots(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = fake.argv("dags", "pause", "etl", "--note", "db migration", token="operator")
    assert main(argv) == 0
    assert fake.dags.requests[-1].note == "db migration"
    dag = fake.dags._find("etl", None)
    dag.pause_note, dag.overlap, dag.max_runs, dag.scheduled_runs = "db migration", "skip", 3, 1
    skipped = dag.skipped.add(count=2, reason="overlap")
    skipped.first.FromJsonString("2024-01-02T00:00:00Z")
    skipped.last.FromJsonString("2024-01-03T00:00:00Z")
    capsys.readouterr()
    assert main(fake.argv("dags", "show", "etl")) == 0
    out = capsys.readouterr().out
    assert "pause_note         db migration" in out
    assert "overlap            skip" in out
    assert "max_runs           1 made of 3" in out
    assert "2024-01-02T00:00:00+00:00  2024-01-03T00:00:00+00:00  2      overlap" in out
