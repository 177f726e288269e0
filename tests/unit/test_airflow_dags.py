"""Airflow-shaped DAG files (tests/fixtures/airflow_dags, imports from ``raftsched.airflow``)
run with ``raftsched dags test`` in a subprocess: what ran, in what order, with which values.

Each fixture writes what its tasks saw under the ``out`` param, which the run's conf points
at this test's folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "airflow_dags"


def dags_test(
    dag_id: str,
    out: Path,
    *,
    logical_date: str = "2024-03-02T00:00:00",
    env: dict[str, str] | None = None,
    **conf: object,
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "raftsched", "dags", "test", dag_id, "--folder", str(FIXTURES)]
    argv += ["--logical-date", logical_date, "--conf", json.dumps({"out": str(out), **conf})]
    environ = {**os.environ, **(env or {})}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=environ)


def states(stdout: str) -> dict[str, str]:
    """The final TASK_ID/STATE table `dags test` prints."""
    table = stdout.split("TASK_ID", 1)[1].splitlines()[1:]
    return {row.split()[0]: row.split()[1] for row in table if row and not row.startswith("run ")}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_the_bash_tutorial_retries_renders_macros_and_runs_in_order(tmp_path: Path) -> None:
    done = dags_test("tutorial", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    order = lines(tmp_path / "order")
    assert order[0] == "print_date"  # t1 >> [t2, t3]
    assert order.index("sleep try 1") < order.index("sleep try 2")  # failed, then retried
    assert set(order[1:]) == {"sleep try 1", "sleep try 2", "templated"}
    # schedule=timedelta(days=1): ds is the START of the interval, as in Airflow
    assert lines(tmp_path / "templated") == [
        f"{i} 2024-03-01 2024-03-08 20240301" for i in range(3)
    ]


def test_the_taskflow_etl_passes_multiple_outputs_by_key(tmp_path: Path) -> None:
    done = dags_test("tutorial_taskflow_api", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "load").read_text() == "1236.70 float"
    assert "Total order value is: 1236.70" in done.stdout


@pytest.mark.parametrize(
    ("path", "go_on", "ran"),
    [
        ("a", True, ["path_a", "second_branch.a", "after_gate"]),
        ("b", False, ["path_b", "second_branch.b"]),
    ],
)
def test_branches_labels_and_a_short_circuit_follow_the_params(
    tmp_path: Path, path: str, go_on: bool, ran: list[str]
) -> None:
    done = dags_test("branching", tmp_path, path=path, go_on=go_on)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(lines(tmp_path / "ran")) == sorted(ran)
    other = "b" if path == "a" else "a"
    got = states(done.stdout)
    assert got[f"path_{other}"] == got[f"second_branch.{other}"] == "skipped"
    assert got["join"] == "success"  # none_failed_min_one_success after one skipped branch
    assert got["after_gate"] == ("success" if go_on else "skipped")


def test_params_arrive_with_their_json_types_and_schemas_are_checked(tmp_path: Path) -> None:
    done = dags_test("params_types", tmp_path, x=7, tags=["p", "q"])
    assert done.returncode == 0, done.stdout + done.stderr
    typed = json.loads((tmp_path / "params.json").read_text())
    assert typed["x"] == [7, "int"]
    assert typed["ratio"] == [0.5, "float"]
    assert typed["flag"] == [False, "bool"]
    assert typed["tags"] == [["p", "q"], "list"]
    assert (tmp_path / "x").read_text() == "x=7 twice=14\n"
    # a schema key the cluster checks (minimum): refused before the run
    refused = dags_test("params_types", tmp_path, x=1)
    assert refused.returncode != 0
    assert "param 'x' is 1: expected at least 3" in refused.stderr
    # a JSON Schema keyword only jsonschema knows (pattern): the Python task refuses it
    bad = dags_test("params_types", tmp_path / "bad", code="bad")
    assert bad.returncode == 1
    assert "param 'code'" in bad.stdout and "does not match" in bad.stdout


def test_a_failure_callback_gets_airflows_context(tmp_path: Path) -> None:
    done = dags_test("failure_callback", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    task = json.loads((tmp_path / "task_failed.json").read_text())
    assert task["task_id"] == "breaks" and task["dag_id"] == "failure_callback"
    assert task["try_number"] == 1
    assert task["exception"] == "disk on fire"
    assert task["out"] == str(tmp_path)
    run = json.loads((tmp_path / "dag_failed.json").read_text())
    assert run == {"reason": "task_failure", "run_id": task["run_id"]}


def test_task_groups_prefix_ids_and_order_whole_groups(tmp_path: Path) -> None:
    done = dags_test("task_groups", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    order = lines(tmp_path / "order")
    assert order[0] == "section_1.task_1"
    assert set(order[1:3]) == {"section_1.task_2", "section_1.inner_section.task_3"}
    assert order[3:] == ["section_2.first", "section_2.second 2", "end"]


def test_context_macros_template_files_and_native_rendering(tmp_path: Path) -> None:
    done = dags_test("context_and_macros", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    # create_cron_data_intervals=True: the run at 2024-03-02 00:00 is logical date 03-01
    assert report["ds"] == "2024-03-01"
    assert report["logical_date"] == "2024-03-01T00:00:00+00:00"
    assert report["end"] == "2024-03-02T00:00:00+00:00"
    assert report["label"] == 20240301  # native rendering: "20240301" is an int
    assert report["count"] == [6, "int"]
    assert report["templates_dict"] == {"week_later": "2024-03-08", "next": "2024-03-02"}
    assert report["ti"] == ["report", 1]
    assert report["has_dag_run"] is True
    assert (tmp_path / "script").read_text() == "2024-03-01 01/03/2024 /\n"  # cwd="/"
    current = json.loads((tmp_path / "current.json").read_text())
    assert current == {"ds": "2024-03-01", "task_id": "current"}
    assert (tmp_path / "shout").read_text() == "bash 2024-03-01\n"  # @task.bash with context
    got = states(done.stdout)
    assert got["skipped"] == got["after_skipped"] == "skipped"  # exit 99, then all_success


def test_variables_named_in_templates_are_declared_and_rendered(tmp_path: Path) -> None:
    # dags test reads declared variables from this environment (the worker's env backend)
    values = {
        "region": "eu-west",
        "settings": '{"limit": 5}',
        "extra": "[1, 2]",
        "other": "never-read",
    }
    env = {f"RAFTSCHED_SECRET_VAR_{k}": v for k, v in values.items()}
    env["RAFTSCHED_SECRET_CONN_db"] = "postgresql://app:pw@db.example:5433/sales?sslmode=require"
    done = dags_test("variables", tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "bash").read_text() == "eu-west 5\n"
    assert json.loads((tmp_path / "python").read_text()) == {
        "region": "eu-west",
        "limit": 5,
        "extra": [1, 2],  # Variable.get(..., deserialize_json=True)
        "absent": "fallback",  # not declared: default_var
        "db": ["db.example", 5433, "app", "sales", {"sslmode": "require"}],  # BaseHook
    }
    missing = dags_test("variables", tmp_path / "missing", env={})
    assert missing.returncode == 1  # the declared variables must exist: no silent ""
    assert "task bash declares variables" in missing.stderr


def test_ti_xcom_pull_reads_the_direct_upstream_return_values(tmp_path: Path) -> None:
    done = dags_test("xcom_pull", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    pulled = json.loads((tmp_path / "pulled.json").read_text())
    assert pulled["orders"] == {"orders": 3, "total": 12.5}
    assert pulled["both"] == [{"orders": 3, "total": 12.5}, "eu"]
    assert pulled["total"] == 12.5  # key= reads one key of a dict value
    assert "only the return values of a task's direct upstream tasks" in pulled["not_upstream"]
    assert (tmp_path / "templated").read_text() == "3 eu 12.5\n"  # {{ ti.xcom_pull(...) }}


def test_dynamic_task_mapping_runs_each_instance_and_hands_on_the_list(tmp_path: Path) -> None:
    done = dags_test("dynamic_mapping", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    found = states(done.stdout)
    assert found["scale"] == "success" and found["never"] == "skipped"
    # downstream of a mapped task: the list of the instances' values, in map index order
    assert json.loads((tmp_path / "total.json").read_text()) == [20, 40, 60]
    assert json.loads((tmp_path / "sums.json").read_text()) == [3, 30]
    # each instance has its own tries: only instance 1 was tried twice
    assert [lines(tmp_path / f"scale-{i}") for i in range(3)] == [
        ["try 1"],
        ["try 1", "try 2"],
        ["try 1"],
    ]
    # Airflow's ti.map_index and task id in the context; RAFTSCHED_MAP_INDEX in bash
    indexes = json.loads((tmp_path / "indexes.json").read_text())
    assert indexes == [[0, "context_index", "a"], [1, "context_index", "b"]]
    assert sorted(lines(tmp_path / "echo")) == ["one 0", "two 1"]
    assert "--- add_one[2]: success" in done.stdout
    assert "--- never: skipped: mapped over 0 items" in done.stdout
    # a classic PythonOperator maps op_kwargs
    assert lines(tmp_path / "greet") == ["hi ann", "yo bob"]
    assert "--- greet: success (2 instances)" in done.stdout


def test_a_mapped_task_past_its_bound_fails_saying_why(tmp_path: Path) -> None:
    done = dags_test("dynamic_mapping_bound", tmp_path)
    assert done.returncode == 1
    assert states(done.stdout) == {"three": "success", "too_many": "failed"}
    assert "3 instances, past its max_map_length of 2" in done.stdout


def test_depends_on_past_lets_the_first_run_through(tmp_path: Path) -> None:
    # one run: nothing before it, so depends_on_past and wait_for_downstream hold nothing back
    (tmp_path / "go-20240302").touch()
    done = dags_test("past_runs", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines(tmp_path / "order") == [
        "extract 2024-03-02",
        "load 2024-03-02",
        "report 2024-03-02",
    ]


def test_trigger_dagrun_renders_its_request_and_checks_the_target(tmp_path: Path) -> None:
    done = dags_test("trigger_controller", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "would trigger DAG 'trigger_target'" in done.stdout
    # the templated conf rendered on the "worker"; downstream pulls the request
    assert lines(tmp_path / "order")[1] == "after trigger_target"
    assert '"message":"from trigger_controller"' in done.stdout
    unknown = dags_test("trigger_controller", tmp_path, target="nope")
    assert unknown.returncode == 1
    assert "no DAG 'nope' in the DAGs folder" in unknown.stdout


def test_a_dag_with_dagrun_timeout_runs_within_it(tmp_path: Path) -> None:
    # dags test does not time runs out (the cluster's leader does): the DAG just runs
    done = dags_test("run_timeout", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "slow.done").exists() and (tmp_path / "after.done").exists()


def test_xcom_arg_map_transforms_each_item_on_the_worker(tmp_path: Path) -> None:
    done = dags_test("xcom_map_demo", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines(tmp_path / "loaded") == ["/DATA/A.CSV", "/DATA/B.CSV", "/DATA/C.CSV"]
    assert (tmp_path / "total").read_text() == "/DATA/A.CSV,/DATA/B.CSV,/DATA/C.CSV"


def test_trigger_and_wait_renders_its_run_id_and_says_it_would_wait(tmp_path: Path) -> None:
    done = dags_test("trigger_and_wait", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "would trigger DAG 'trigger_target'" in done.stdout
    assert "reset_dag_run: on a cluster, an existing run would be cleared" in done.stdout
    assert "wait_for_completion: on a cluster, the task would wait for success" in done.stdout
    assert states(done.stdout) == {"trigger_and_wait": "success", "after": "success"}
    # dags test's XCom is the rendered request (no run is made): its templated run id
    assert lines(tmp_path / "waited") == ["nightly__2024-03-02"]  # (--logical-date's ds)
