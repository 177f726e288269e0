"""Issue #9, the DAG parser's side: every value a DAG file supplies is bounded as
``raftsched.core.limits`` says, and breaking a bound is a DagDefinitionError (an import error
under `dags errors`), never a registration the cluster's apply would refuse. Import errors
themselves are clean and bounded."""

from __future__ import annotations

import re
import textwrap
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from raftsched.core import limits
from raftsched.core.model import ImportErrorRecord
from raftsched.dags import parser
from raftsched.dags.authoring import DAG, BashTask, PythonTask
from raftsched.dags.validation import check_spec
from raftsched.errors import DagDefinitionError


def build(**dag_kw: Any) -> DAG:
    dag_kw.setdefault("schedule", "@daily")
    dag_kw.setdefault("start_date", datetime(2024, 1, 1))
    return DAG("d", **dag_kw)


def work(x: int = 0) -> None:
    return None


@pytest.mark.parametrize(
    ("dag_kw", "match"),
    [
        (
            {"tags": [f"t{i}" for i in range(limits.MAX_TAGS + 1)]},
            f"tags has {limits.MAX_TAGS + 1} items",
        ),
        (
            {"tags": ["x" * (limits.MAX_TAG_CHARS + 1)]},
            f"tag is {limits.MAX_TAG_CHARS + 1} characters",
        ),
        ({"tags": ["a\x00b"]}, "tag contains a NUL"),
        (
            {"description": "d" * (limits.MAX_DESCRIPTION_CHARS + 1)},
            f"description is {limits.MAX_DESCRIPTION_CHARS + 1}",
        ),
        ({"description": "bad\ud800"}, "description contains a NUL character or invalid UTF-8"),
        ({"schedule": "* " * 600}, "schedule is 1200 characters"),
        ({"schedule": timedelta(days=400)}, f"at most {limits.MAX_DURATION_SECONDS} seconds"),
        ({"timezone": "Z" * 300}, "timezone is 300 characters"),
        ({"start_date": datetime(1, 1, 1), "timezone": "Asia/Tokyo"}, "out of range"),
        ({"start_date": datetime(1800, 1, 1)}, "1800-01-01T00:00:00+00:00 is out of range"),
        ({"end_date": datetime(9999, 12, 31, 23), "timezone": "America/Denver"}, "out of range"),
        (
            {"max_active_runs": limits.MAX_ACTIVE + 1},
            f"max_active_runs of DAG 'd' must be at most {limits.MAX_ACTIVE}",
        ),
        ({"max_active_tasks": 2**70}, f"must be at most {limits.MAX_ACTIVE}, got"),
        (
            {"default_retries": limits.MAX_RETRIES + 1},
            f"default_retries of DAG 'd' must be at most {limits.MAX_RETRIES}",
        ),
        (
            {"default_retry_delay": timedelta.max},
            f"must be at most {limits.MAX_DURATION_SECONDS} seconds",
        ),
    ],
)
def test_dag_values_past_a_bound_are_definition_errors(dag_kw: dict[str, Any], match: str) -> None:
    with pytest.raises(DagDefinitionError, match=re.escape(match)):
        build(**dag_kw)


@pytest.mark.parametrize(
    ("task_kw", "match"),
    [
        (
            {"command": "x" * (limits.MAX_COMMAND_CHARS + 1)},
            f"command is {limits.MAX_COMMAND_CHARS + 1} characters",
        ),
        ({"command": "echo a\x00b"}, "command contains a NUL"),
        (
            {"env": {f"V{i}": "1" for i in range(limits.MAX_ENV_VARS + 1)}},
            f"env has {limits.MAX_ENV_VARS + 1} items",
        ),
        (
            {"env": {"V": "v" * (limits.MAX_ENV_VALUE_CHARS + 1)}},
            f"V is {limits.MAX_ENV_VALUE_CHARS + 1} characters",
        ),
        ({"env": {"A=B": "1"}}, "must be non-empty and hold no '='"),
        ({"env": {"V": "a\x00"}}, "V contains a NUL"),
        (
            {"retries": 10**6},
            f"retries of task 't' in DAG 'd' must be at most {limits.MAX_RETRIES}",
        ),
        ({"retry_delay": timedelta(days=367)}, f"at most {limits.MAX_DURATION_SECONDS} seconds"),
        ({"max_retry_delay": timedelta.max}, f"at most {limits.MAX_DURATION_SECONDS} seconds"),
        (
            {"execution_timeout": timedelta(days=999_999)},
            f"at most {limits.MAX_DURATION_SECONDS} seconds",
        ),
        ({"priority_weight": 2**40}, f"must be at most {limits.MAX_PRIORITY_WEIGHT}"),
        ({"priority_weight": -(2**40)}, f"must be an integer >= -{limits.MAX_PRIORITY_WEIGHT}"),
    ],
)
def test_task_values_past_a_bound_are_definition_errors(
    task_kw: dict[str, Any], match: str
) -> None:
    task_kw.setdefault("command", "true")
    with build(), pytest.raises(DagDefinitionError, match=match):
        BashTask("t", **task_kw)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"a": "x" * (limits.MAX_KWARGS_BYTES + 1)},
            f"kwargs is {limits.MAX_KWARGS_BYTES + 9} bytes as JSON",
        ),
        ({"a": "x\x00"}, "kwargs has a string with NUL"),
        ({"a\ud800": 1}, "kwargs has a key with NUL or invalid UTF-8"),
        ({"a": 2**70}, "kwargs has an integer beyond 64 bits"),
    ],
)
def test_python_kwargs_are_bounded(kwargs: dict[str, Any], match: str) -> None:
    with build(), pytest.raises(DagDefinitionError, match=match):
        PythonTask("t", fn=work, kwargs=kwargs)


def test_deep_kwargs_are_refused_without_recursing() -> None:
    deep: Any = 1
    for _ in range(100):
        deep = [deep]
    with build(), pytest.raises(DagDefinitionError, match="kwargs is nested deeper than 32"):
        PythonTask("t", fn=work, kwargs={"a": deep})
    for _ in range(100_000):  # json.dumps itself gives up: still a definition error
        deep = [deep]
    with build(), pytest.raises(DagDefinitionError, match="JSON-serializable"):
        PythonTask("t2", fn=work, kwargs={"a": deep})


def test_too_many_tasks() -> None:
    with build() as dag:
        for i in range(limits.MAX_TASKS_PER_DAG):
            BashTask(f"t{i}", command="true")
        with pytest.raises(DagDefinitionError, match="more than 10000 tasks"):
            BashTask("one_more", command="true")
    assert len(dag.tasks) == limits.MAX_TASKS_PER_DAG


def test_values_at_the_bounds_are_accepted() -> None:
    with build(
        tags=["x" * limits.MAX_TAG_CHARS] * 2,
        description="d" * limits.MAX_DESCRIPTION_CHARS,
        start_date=datetime(1900, 1, 1, 9),
        end_date=datetime(2999, 12, 31),
        max_active_runs=limits.MAX_ACTIVE,
        default_retries=limits.MAX_RETRIES,
    ) as dag:
        BashTask(
            "t",
            command="x" * limits.MAX_COMMAND_CHARS,
            env={"V": "v" * limits.MAX_ENV_VALUE_CHARS},
            execution_timeout=timedelta(seconds=limits.MAX_DURATION_SECONDS),
            priority_weight=limits.MAX_PRIORITY_WEIGHT,
        )
    spec = dag.to_spec(fileloc="/dags/d.py")
    assert check_spec(spec) is spec


def test_check_spec_refuses_what_the_authoring_api_was_bypassed_for() -> None:
    with build() as dag:
        BashTask("t", command="true")
    spec = dag.to_spec(fileloc="/dags/d.py")
    task = spec.tasks[0]
    for bad, match in [
        (
            replace(spec, fileloc="/" + "f" * limits.MAX_FILELOC_CHARS),
            f"fileloc is {limits.MAX_FILELOC_CHARS + 1}",
        ),
        (replace(spec, fileloc="/dags/\udcff.py"), "fileloc contains a NUL"),
        (replace(spec, description="a\x00"), "description contains a NUL"),
        (replace(spec, tasks=(replace(task, command="a\x00"),)), "command contains a NUL"),
        (replace(spec, tasks=(replace(task, retries=-1),)), "retries is -1"),
        (replace(spec, tasks=(replace(task, kwargs_json="[" * 5000),)), "not a JSON object"),
        (replace(spec, tasks=(replace(task, kind="perl"),)), "kind 'perl'"),
        (replace(spec, max_active_runs=0), "max_active_runs is 0"),
    ]:
        with pytest.raises(DagDefinitionError, match=match):
            check_spec(bad)


# -- the parser ------------------------------------------------------------------------------


def parse(tmp_path: Path, name: str, source: str) -> parser.ParseResult:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return parser.parse_file(path, timeout=20, output_limit=100_000)


def test_a_dag_breaking_a_bound_is_an_import_error(tmp_path: Path) -> None:
    result = parse(
        tmp_path,
        "many_tags.py",
        """
        from raftsched import DAG
        DAG("tagged", schedule=None, tags=[str(i) for i in range(500)])
        """,
    )
    assert not result.specs
    (error,) = result.errors
    assert "tags has 500 items; the limit is 50" in error.message


def test_specs_from_the_child_are_checked_again(tmp_path: Path) -> None:
    """A DAG file can patch the child's checks away; the parent still refuses."""
    result = parse(
        tmp_path,
        "sneaky.py",
        """
        from raftsched import DAG
        from raftsched.dags import authoring, validation
        validation.check_spec = lambda spec: spec
        authoring.v.check_description = lambda text, dag_id: text
        DAG("sneaky", schedule=None, description="x" * 100_000)
        """,
    )
    assert not result.specs
    (error,) = result.errors
    assert "description is 100000 characters long" in error.message


def test_import_errors_are_clean_and_bounded(tmp_path: Path) -> None:
    result = parse(
        tmp_path,
        "raises.py",
        """
        raise ValueError("bad\\x00value \\udcff" + "!" * 100_000)
        """,
    )
    (error,) = result.errors
    assert limits.is_clean(error.message) and limits.is_clean(error.traceback)
    assert error.message.startswith("ValueError: bad\ufffdvalue \ufffd")
    assert len(error.message) <= limits.MAX_IMPORT_ERROR_CHARS
    assert len(error.traceback) <= limits.MAX_IMPORT_ERROR_CHARS


def test_import_error_helper_and_the_cap_on_their_number(monkeypatch: pytest.MonkeyPatch) -> None:
    record = parser.import_error(
        "/" + "p" * 5000 + "\udcff.py", "m\x00" * 50_000, "t\ud800" * 50_000
    )
    assert len(record.fileloc) == limits.MAX_FILELOC_CHARS
    assert record.fileloc.endswith("\ufffd.py")
    assert len(record.message) <= limits.MAX_IMPORT_ERROR_CHARS
    assert len(record.traceback) <= limits.MAX_IMPORT_ERROR_CHARS
    assert limits.is_clean(record.message + record.traceback + record.fileloc)
    monkeypatch.setattr(limits, "MAX_IMPORT_ERRORS", 3)
    results = [
        parser.FileResult(f"/dags/f{i}.py", error=ImportErrorRecord(f"/dags/f{i}.py", f"e{i}"))
        for i in range(10)
    ]
    combined = parser._combine(results)
    assert [e.fileloc for e in combined.errors] == ["/dags/f0.py", "/dags/f1.py", "/dags/f2.py"]
    assert combined.errors[-1].message == (
        "[7 more files failed to load; only 3 import errors are kept, fix these first] e2"
    )
