"""Dynamic task mapping as a DAG file writes it (dags/mapping.py): what .expand(),
.expand_kwargs() and .partial() record in the spec, and the mistakes they refuse."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from raftsched.core import limits
from raftsched.dags.authoring import DAG, BashTask, PythonTask
from raftsched.dags.authoring import task as tf
from raftsched.errors import DagDefinitionError

START = datetime(2024, 1, 1)


def noop(**_: Any) -> None:
    return None


def specs(dag: DAG) -> dict[str, Any]:
    return {t.task_id: t for t in dag.to_spec().tasks}


def test_taskflow_partial_and_expand_record_the_expansion_and_wire_the_upstream() -> None:
    with DAG("m", schedule=None, start_date=START, max_map_length=50) as dag:

        @tf
        def numbers() -> list[int]:
            return [1, 2]

        @tf
        def double(x: int, factor: int) -> int:
            return x * factor

        @tf
        def add(a: int, b: int) -> int:
            return a + b

        double.partial(factor=2).expand(x=numbers())
        add.expand_kwargs([{"a": 1, "b": 2}])
    found = specs(dag)
    assert found["double"].upstream == ("numbers",)
    assert json.loads(found["double"].expand_json) == {
        "args": [["x", {"__raftsched_xcom__": "numbers"}]]
    }
    assert json.loads(found["double"].kwargs_json) == {"factor": 2, "x": None}
    assert found["double"].max_map_length == 50  # the DAG's
    assert json.loads(found["add"].expand_json) == {"kwargs": [{"a": 1, "b": 2}]}
    assert found["numbers"].expand_json == "" and found["numbers"].max_map_length == 0


def test_classic_tasks_map_through_partial() -> None:
    with DAG("m", schedule=None, start_date=START) as dag:
        BashTask.partial(task_id="say", retries=2, max_map_length=3).expand(
            command=["echo a", "echo b"]
        )
        PythonTask.partial(task_id="py", fn=noop, kwargs={"k": 1}).expand(x=[1, 2])
    found = specs(dag)
    assert found["say"].retries == 2 and found["say"].max_map_length == 3
    assert json.loads(found["say"].expand_json) == {"args": [["command", ["echo a", "echo b"]]]}
    assert found["py"].max_map_length == 0  # [core] max_map_length, else the core's 1,024


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (lambda: BashTask.partial(task_id="b").expand(retries=[1]), "cannot map over retries"),
        (lambda: BashTask.partial(task_id="b").expand(command="echo"), "maps command over str"),
        (lambda: BashTask.partial(task_id="b").expand(), "needs at least one argument"),
        (
            lambda: BashTask.partial(task_id="b", command="x").expand(command=["a"]),
            "given to both partial() and expand()",
        ),
        (
            lambda: BashTask.partial(task_id="b", max_map_length=0).expand(command=["a"]),
            "max_map_length is 0",
        ),
        (
            lambda: BashTask.partial(task_id="b").expand(command=[None] * 10_001),
            f"the limit is {limits.MAX_MAP_LENGTH}",
        ),
        (
            lambda: BashTask.partial(task_id="b" * 246).expand(command=["a"]),
            "at most 243 characters",
        ),
        (
            lambda: BashTask.partial(task_id="b").expand(command=[float("nan")]),
            "not JSON-able",
        ),
    ],
)
def test_mapping_mistakes_are_definition_errors(build: Any, problem: str) -> None:
    with DAG("m", schedule=None, start_date=START), pytest.raises(DagDefinitionError) as err:
        build()
    assert problem in str(err.value)


def test_a_dag_bound_out_of_range_is_refused() -> None:
    with pytest.raises(DagDefinitionError, match="max_map_length is 10001"):
        DAG("m", schedule=None, start_date=START, max_map_length=10_001)


def test_zip_and_concat_say_what_to_do_instead() -> None:
    with DAG("m", schedule=None, start_date=START):

        @tf
        def numbers() -> list[int]:
            return [1]

        out = numbers()
        for name in ("zip", "concat"):
            with pytest.raises(DagDefinitionError, match="not supported yet: have a @task"):
                getattr(out, name)(out)


def test_map_runs_its_functions_on_each_item_where_the_instance_runs() -> None:
    from raftsched.dags.taskflow import registered_callable

    seen: list[Any] = []
    with DAG("m", schedule=None, start_date=START) as dag:

        @tf
        def numbers() -> list[int]:
            return [1, 2]

        @tf
        def show(x: Any, label: str) -> None:
            seen.append((label, x))

        show.partial(label="n").expand(x=numbers().map(lambda n: n * 10).map(str))
    spec = specs(dag)["show"]
    # the expansion is the plain output's: the scheduler counts the same items
    assert json.loads(spec.expand_json) == {"args": [["x", {"__raftsched_xcom__": "numbers"}]]}
    call = registered_callable(spec.callable_name)
    call(x=3, label="n")  # what the worker does with instance kwargs
    assert seen == [("n", "30")]


def test_map_output_is_for_expand_only_and_for_task_functions() -> None:
    with DAG("m", schedule=None, start_date=START):

        @tf
        def numbers() -> list[int]:
            return [1]

        @tf
        def one(values: Any) -> None:
            pass

        mapped = numbers().map(str)
        with pytest.raises(DagDefinitionError, match="can only be expanded over"):
            one(mapped)
        with pytest.raises(DagDefinitionError, match="only @task functions"):
            BashTask.partial(task_id="b").expand(command=mapped)
        with pytest.raises(DagDefinitionError, match="expand_kwargs"):
            one.expand_kwargs(mapped)
        with pytest.raises(DagDefinitionError, match="takes a function"):
            numbers().map(3)
        with pytest.raises(DagDefinitionError, match="index the output before"):
            mapped["k"]


def test_an_instance_sees_its_map_index_in_templates_and_its_environment() -> None:
    from raftsched.core.model import TaskKey
    from raftsched.dags.templating import template_context
    from raftsched.worker.transport import Assignment

    names = {
        "dag_id": "d",
        "run_id": "r",
        "try_number": 1,
        "logical_date": None,
        "data_interval_start": None,
        "data_interval_end": None,
        "conf": {},
    }
    assert template_context(task_id="m[3]", **names)["map_index"] == 3
    assert template_context(task_id="m", **names)["map_index"] == -1
    env = Assignment(key=TaskKey("d", "r", "m[3]"), token=1, try_number=1, kind="bash").task_env()
    assert env["RAFTSCHED_MAP_INDEX"] == "3" and env["RAFTSCHED_TASK_ID"] == "m[3]"
    plain = Assignment(key=TaskKey("d", "r", "m"), token=1, try_number=1, kind="bash").task_env()
    assert "RAFTSCHED_MAP_INDEX" not in plain
