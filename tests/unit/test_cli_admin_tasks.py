"""`raftsched runs list` and `raftsched tasks list|logs|clear|mark` against a real gRPC server
with canned data, in both output modes, with their exit codes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_admin_support import FakeCluster, dead_address, fake_cluster, isolate

from raftsched.cli.main import main


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    isolate(monkeypatch, tmp_path)
    with fake_cluster(tmp_path) as cluster:
        yield cluster


# -- runs list --------------------------------------------------------------------------------


def test_runs_list_table(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("runs", "list", "etl", token="viewer")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "DAG_ID", "RUN_ID", "STATE", "TYPE", "LOGICAL_DATE", "START_DATE", "END_DATE",
    ]  # fmt: skip
    assert lines[1].split() == [
        "etl", "scheduled__2024-01-03", "success", "scheduled", "2024-01-03T00:00:00+00:00",
        "-", "-",
    ]  # fmt: skip
    assert len(lines) == 4  # three runs over two pages


def test_runs_list_json_filters_and_limit(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = fake.argv("runs", "list", "--state", "success", "--state", "failed", output="json")
    assert main([*argv, "--type", "scheduled", "--limit", "2"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [run["run_id"] for run in payload["runs"]] == [
        "scheduled__2024-01-03",
        "scheduled__2024-01-02",
    ]
    assert payload["truncated"] is True
    [request] = fake.dags.requests
    assert list(request.states) == [3, 4] and request.run_type == 1 and request.page_size == 2


def test_runs_list_truncation_note(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("runs", "list", "--limit", "1")) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "(first 1 runs; --limit N shows more)"


def test_runs_list_unknown_dag(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("runs", "list", "nope")) == 1
    assert capsys.readouterr().err == (
        "raftsched: error: DAG 'nope' not found: `raftsched dags list` shows the known DAGs\n"
    )


def test_runs_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs"]) == 2
    for bad in (["--state", "bogus"], ["--limit", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["runs", "list", *bad])
        assert exit_info.value.code == 2


# -- tasks list -------------------------------------------------------------------------------


def test_tasks_list_table(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("tasks", "list", "etl", "r1")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "etl r1: running"
    assert lines[1].split() == [
        "TASK_ID", "STATE", "TRY", "WORKER", "START_DATE", "END_DATE", "EXIT_CODE",
    ]  # fmt: skip
    assert lines[2].split() == [
        "extract", "success", "1/3", "w1", "2024-01-01T00:00:05+00:00", "-", "0",
    ]  # fmt: skip
    assert lines[3].split() == ["load", "up_for_retry", "1/2", "-", "-", "-", "-"]


def test_tasks_list_json(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("tasks", "list", "etl", "r1", output="json")) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["run"]["state"] == "running"
    extract, load = payload["task_instances"]
    assert extract["key"] == {"dag_id": "etl", "run_id": "r1", "task_id": "extract"}
    assert extract["exit_code"] == 0 and load["exit_code"] is None
    assert load["state"] == "up_for_retry"


def test_tasks_list_unknown_run(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("tasks", "list", "etl", "r9")) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("raftsched: error: run 'r9' of DAG 'etl' not found: `raftsched runs")


# -- tasks logs -------------------------------------------------------------------------------


def test_logs_table_and_json(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("tasks", "logs", "etl", "r1", "extract", "--try", "2")) == 0
    assert capsys.readouterr().out == "one\ntwo\n"
    request = fake.dags.requests[-1]
    assert (request.try_number, request.follow, request.task_id) == (2, False, "extract")
    assert main(fake.argv("tasks", "logs", "etl", "r1", "extract", output="json")) == 0
    chunks = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(c["seq"], c["stream"], c["text"]) for c in chunks] == [
        (1, "stdout", "one\n"),
        (2, "stderr", "two\n"),
    ]
    assert fake.dags.requests[-1].try_number == 0  # the latest


def test_logs_follow_writes_each_chunk_as_it_arrives(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    codes: list[int] = []
    argv = fake.argv("tasks", "logs", "etl", "r1", "extract", "--follow")
    thread = threading.Thread(target=lambda: codes.append(main(argv)))
    thread.start()
    seen = ""
    deadline = time.monotonic() + 10
    while "one" not in seen and time.monotonic() < deadline:  # the server holds chunk 2 back
        time.sleep(0.02)
        seen += capsys.readouterr().out
    assert seen == "one\n"
    fake.dags.log_gate.set()
    thread.join(10)
    assert codes == [0]
    assert capsys.readouterr().out == "two\n"
    assert fake.dags.requests[-1].follow is True


def test_logs_cluster_down_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["tasks", "logs", "etl", "r1", "x", "--server", dead_address(), "--timeout", "0.5"]
    assert main(argv) == 3
    assert "GetTaskLog" in capsys.readouterr().err


def test_logs_bad_try_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["tasks", "logs", "etl", "r1", "x", "--try", "0"])
    assert exit_info.value.code == 2


# -- tasks clear | mark -----------------------------------------------------------------------


@pytest.mark.parametrize("output", ["table", "json"])
def test_clear(fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str) -> None:
    argv = fake.argv("tasks", "clear", "etl", "r1", "extract", "--downstream", output=output)
    assert main(argv) == 0
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out) == {"cleared_task_ids": ["extract", "load"]}
    else:
        assert out == "cleared: extract, load\n"
    [request] = fake.dags.requests
    assert list(request.task_ids) == ["extract"] and request.include_downstream
    assert request.request_id


def test_clear_every_task(fake: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(fake.argv("tasks", "clear", "etl", "r1", token="operator")) == 0
    assert capsys.readouterr().out == "cleared: extract, load\n"
    assert list(fake.dags.requests[0].task_ids) == []


@pytest.mark.parametrize("output", ["table", "json"])
def test_mark(fake: FakeCluster, capsys: pytest.CaptureFixture[str], output: str) -> None:
    argv = fake.argv("tasks", "mark", "etl", "r1", "load", "extract", output=output)
    assert main([*argv, "--state", "failed"]) == 0
    out = capsys.readouterr().out
    if output == "json":
        assert json.loads(out) == {"marked_task_ids": ["extract", "load"], "state": "failed"}
    else:
        assert out == "marked failed: extract, load\n"
    assert fake.dags.requests[0].state == 5  # TASK_STATE_FAILED


def test_mark_and_clear_need_operator(
    fake: FakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = fake.argv("tasks", "mark", "etl", "r1", "load", "--state", "success", token="viewer")
    assert main(argv) == 1
    assert "`raftsched tasks mark` needs role operator" in capsys.readouterr().err
    assert main(fake.argv("tasks", "clear", "etl", "r1", token="viewer")) == 1
    assert "`raftsched tasks clear` needs role operator" in capsys.readouterr().err


def test_mark_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks"]) == 2
    for bad in (["etl", "r1", "load"], ["etl", "r1", "load", "--state", "running"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["tasks", "mark", *bad])
        assert exit_info.value.code == 2
