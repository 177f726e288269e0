"""DAG params (raftsched.dags.params), their bounds in the core, and task templates
(raftsched.dags.templating): the sandbox, its bounds, and the worker's use of them."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from raftsched import DAG, BashTask, Param, PythonTask
from raftsched.core import limits
from raftsched.core.model import DagSpec, TaskKey, TaskSpec
from raftsched.core.validate_specs import check_spec as core_check_spec
from raftsched.dags.params import check_conf, effective_params
from raftsched.dags.templating import (
    MAX_RENDERED_CHARS,
    render_assignment,
    render_for_display,
    render_text,
    template_context,
)
from raftsched.errors import DagDefinitionError, LimitExceeded, TemplateError
from raftsched.worker.runner import Attempt
from raftsched.worker.transport import Assignment

START = datetime(2024, 1, 1, tzinfo=UTC)
LOGICAL = datetime(2024, 3, 5, 6, 7, 8, tzinfo=UTC)


def _dag_params(**params: object) -> str:
    with DAG("p", schedule=None, start_date=START, params=params) as dag:
        BashTask("t", command="true")
    return dag.to_spec().params_json


def _context(conf: dict | None = None, params_json: str = "") -> dict:
    return template_context(
        dag_id="d",
        run_id="manual__1",
        task_id="t",
        try_number=2,
        logical_date=LOGICAL,
        data_interval_start="2024-03-04T06:07:08+00:00",
        data_interval_end=LOGICAL,
        conf=conf or {},
        params_json=params_json,
    )


# -- params --------------------------------------------------------------------------------


def test_params_in_the_spec_and_defaults_merged_with_the_conf() -> None:
    text = _dag_params(
        days=Param(7, type="integer", minimum=1, maximum=31, description="window"),
        region=Param("eu", enum=["eu", "us"]),
        label="weekly",
        owner=Param(type="string", minLength=2),
    )
    stored = json.loads(text)
    assert stored["days"] == {"default": 7, "type": "integer", "minimum": 1, "maximum": 31,
                              "description": "window"}  # fmt: skip
    assert "default" not in stored["owner"]
    check_conf(text, {"owner": "ann", "days": 3, "extra": [1]})  # unknown keys are allowed
    assert effective_params(text, {"owner": "ann", "days": 3}) == {
        "days": 3, "region": "eu", "label": "weekly", "owner": "ann"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("conf", "named", "expected"),
    [
        ({"owner": "ann", "days": "7"}, "'days'", "expected type integer"),
        ({"owner": "ann", "days": True}, "'days'", "expected type integer"),
        ({"owner": "ann", "days": 40}, "'days'", "expected at most 31"),
        ({"owner": "ann", "days": 0}, "'days'", "expected at least 1"),
        ({"owner": "ann", "region": "mars"}, "'region'", 'expected one of "eu", "us"'),
        ({"owner": "a"}, "'owner'", "expected at least 2 characters"),
        ({}, "'owner'", "is missing"),
    ],
)
def test_a_bad_conf_is_refused_naming_the_param(conf: dict, named: str, expected: str) -> None:
    text = _dag_params(
        days=Param(7, type="integer", minimum=1, maximum=31),
        region=Param("eu", enum=["eu", "us"]),
        owner=Param(type="string", minLength=2),
    )
    with pytest.raises(LimitExceeded) as caught:
        check_conf(text, conf)
    assert named in str(caught.value) and expected in str(caught.value)
    assert str(caught.value).startswith("conf_json param")


def test_a_dag_without_params_keeps_its_spec_and_hash() -> None:
    with DAG("plain", schedule=None, start_date=START) as dag:
        BashTask("t", command="echo {{ ds }}")
    spec = dag.to_spec()
    assert spec.params_json == "" and "params_json" not in spec.to_dict()
    with DAG("plain", schedule=None, start_date=START, params={"x": 1}) as other:
        BashTask("t", command="echo {{ ds }}")
    with_params = other.to_spec()
    assert with_params.spec_hash != spec.spec_hash
    assert DagSpec.from_dict(with_params.to_dict()) == with_params


@pytest.mark.parametrize(
    ("params", "schedule", "message"),
    [
        ({"n": Param("x", type="integer")}, None, "expected type integer"),
        ({"n": Param(1, type="decimal")}, None, "unknown type"),
        ({"n": Param(type="string")}, "@daily", "has no default"),
        ({"n": object()}, None, "JSON"),
        ([1], None, "must be a dict"),
    ],
)
def test_bad_params_are_dag_errors(params: object, schedule: str | None, message: str) -> None:
    with pytest.raises(DagDefinitionError, match=message):
        DAG("bad", schedule=schedule, start_date=START, params=params)  # type: ignore[arg-type]


def test_the_core_bounds_params_json() -> None:
    with DAG("p", schedule=None, start_date=START, params={"x": 1}) as dag:
        BashTask("t", command="true")
    spec = dag.to_spec()
    core_check_spec(spec)
    for bad in (
        "[1]",
        '{"x": 1}',
        '{"x": {"default": 1, "evil": 2}}',
        '{"x": {"type": "decimal"}}',
        "{" * 100,
        json.dumps({f"p{i}": {} for i in range(limits.MAX_PARAMS + 1)}),
        json.dumps({"x": {"default": "y" * limits.MAX_PARAMS_BYTES}}),
    ):
        from dataclasses import replace

        with pytest.raises(LimitExceeded):
            core_check_spec(replace(spec, params_json=bad))


# -- templates -------------------------------------------------------------------------------


def test_the_context_names() -> None:
    params = _dag_params(x=Param(1, type="integer"), name="a")
    text = (
        "{{ ds }} {{ ds_nodash }} {{ ts }} {{ logical_date }} {{ data_interval_start }}"
        " {{ data_interval_end }} {{ run_id }} {{ dag_id }} {{ task_id }} {{ try_number }}"
        " {{ params.x }} {{ params.name }} {{ conf.x }} {{ logical_date.strftime('%H') }}"
    )
    out = render_text(text, _context({"x": 5}, params), "command")
    assert out == (
        "2024-03-05 20240305 2024-03-05T06:07:08+00:00 2024-03-05T06:07:08+00:00"
        " 2024-03-04T06:07:08+00:00 2024-03-05T06:07:08+00:00 manual__1 d t 2 5 a 5 06"
    )


def test_text_without_markers_is_untouched() -> None:
    for text in ("echo ${#arr[@]} {x}", "awk '{print $1}'", ""):
        assert render_text(text, _context(), "command") == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{{ ''.__class__.__mro__ }}", "unsafe"),
        ("{{ lipsum.__globals__ }}", "unsafe"),
        ("{{ self.__init__.__globals__ }}", "unsafe"),
        ("{{ conf.__class__ }}", "unsafe"),
        ("{{ [].append(1) }}", "unsafe"),
        ("{{ namespace(a=1) }}", "'namespace' is undefined"),
        ("one\ntwo {{ missing }}", "line 2: 'missing' is undefined"),
        ("{{ params.nope }}", "has no attribute 'nope'"),
        ("{% if %}", "line 1"),
        ("{{ 'x' * 10**8 }}", "too large"),
        ("{{ 'x'.ljust(10**8) }}", "too large"),
        ("{{ 'x' | center(10**8) }}", "too large"),
        ("{{ 7 ** 100000 }}", "too large"),
        ("{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", "loops"),
        ("{% for i in range(99999) %}" + "y" * 100 + "{% endfor %}", "longer than"),
    ],
)
def test_refused_templates_say_why(text: str, expected: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render_text(text, _context(), "command")
    assert expected in str(caught.value)
    assert str(caught.value).startswith("template error in command")
    assert MAX_RENDERED_CHARS >= 1_000_000


def _assignment(**fields: object) -> Assignment:
    base: dict = dict(
        key=TaskKey("d", "manual__1", "t"),
        token=1,
        try_number=1,
        kind="bash",
        logical_date=LOGICAL.isoformat(),
        data_interval_start=LOGICAL.isoformat(),
        data_interval_end=LOGICAL.isoformat(),
        conf={"who": "ann"},
        params_json=_dag_params(greeting="hello"),
    )
    base.update(fields)
    return Assignment(**base)


def test_render_assignment_renders_command_env_and_kwargs_recursively() -> None:
    a = _assignment(
        command="echo {{ params.greeting }} {{ conf.who }}",
        env=(("DAY", "{{ ds }}"),),
        kwargs={"deep": [{"x": "{{ params.who }}"}, 3], "n": 1},
    )
    out = render_assignment(a)
    assert out.command == "echo hello ann"
    assert out.env == (("DAY", "2024-03-05"),)
    assert out.kwargs == {"deep": [{"x": "ann"}, 3], "n": 1}
    plain = _assignment(command="echo plain")
    assert render_assignment(plain) is plain


def test_an_attempt_sees_its_fencing_token() -> None:
    a = _assignment(token=4711, command="write --token {{ fencing_token }}")
    assert render_assignment(a).command == "write --token 4711"
    assert a.task_env()["RAFTSCHED_FENCING_TOKEN"] == "4711"


def test_display_uses_the_same_rendering() -> None:
    task = TaskSpec(
        "t", "bash", command="echo {{ params.greeting }} {{ ds }}", env=(("A", "{{ run_id }}"),)
    )
    shown = render_for_display(
        task,
        dag_id="d",
        run_id="manual__1",
        try_number=0,
        logical_date=LOGICAL,
        data_interval_start=LOGICAL,
        data_interval_end=LOGICAL,
        conf={"greeting": "hi"},
        params_json=_dag_params(greeting="hello"),
    )
    assert shown == {"command": "echo hi 2024-03-05", "env": [["A", "manual__1"]]}
    task = TaskSpec("t", "python", callable_name="f", kwargs_json='{"a": "{{ nope }}"}')
    shown = render_for_display(
        task,
        dag_id="d",
        run_id="r",
        try_number=1,
        logical_date=LOGICAL,
        data_interval_start=LOGICAL,
        data_interval_end=LOGICAL,
        conf={},
        params_json="",
    )
    assert shown == {"error": "template error in kwargs.a, line 1: 'nope' is undefined"}


def test_a_template_error_fails_the_attempt_not_the_worker() -> None:
    lines: list[tuple[str, str]] = []
    outcome = Attempt(
        _assignment(command="echo {{ ''.__class__ }}"), lambda s, t: lines.append((s, t))
    ).run()
    assert not outcome.success and "unsafe" in outcome.message
    assert any("template error in command" in text for stream, text in lines if stream == "stderr")
    lines.clear()
    outcome = Attempt(
        _assignment(command="echo {{ params.greeting }}-{{ ds }}"),
        lambda s, t: lines.append((s, t)),
    ).run()
    assert outcome.success
    assert "hello-2024-03-05" in "".join(t for s, t in lines if s == "stdout")


def test_python_task_kwargs_are_rendered(tmp_path) -> None:
    dag_file = tmp_path / "dag_kw.py"
    dag_file.write_text("def f(day, who):\n    print('got', day, who)\n")
    outcome_lines: list[str] = []
    a = _assignment(
        kind="python",
        fileloc=str(dag_file),
        callable_name="f",
        kwargs={"day": "{{ ds }}", "who": "{{ conf.who }}"},
    )
    outcome = Attempt(a, lambda s, t: outcome_lines.append(t)).run()
    assert outcome.success, outcome.message
    assert "got 2024-03-05 ann" in "".join(outcome_lines)


def _f(a: str) -> None:
    print(a)


def test_a_python_task_keeps_its_template_kwargs_in_the_spec() -> None:
    with DAG("py", schedule=None, start_date=START) as dag:
        PythonTask("t", fn=_f, kwargs={"a": "{{ ds }}"})
    assert json.loads(dag.to_spec().task("t").kwargs_json) == {"a": "{{ ds }}"}


# -- dags test -------------------------------------------------------------------------------

PARAMS_DAG = """\
from raftsched import DAG, BashTask, Param

with DAG("t_params", schedule=None, params={"days": Param(7, type="integer", maximum=31)}):
    BashTask("a", command="echo days={{ params.days }} ds={{ ds }} who={{ conf.who }}")
"""


def test_dags_test_checks_the_conf_and_renders(tmp_path) -> None:
    import subprocess
    import sys

    (tmp_path / "p.py").write_text(PARAMS_DAG)
    argv = [
        sys.executable,
        "-m",
        "raftsched",
        "dags",
        "test",
        "t_params",
        "--folder",
        str(tmp_path),
    ]
    good = [*argv, "--logical-date", "2026-02-03T00:00:00", "--conf", '{"days": 3, "who": "x"}']
    done = subprocess.run(good, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[a] days=3 ds=2026-02-03 who=x" in done.stdout
    bad = subprocess.run(
        [*argv, "--conf", '{"days": 40}'], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode != 0
    assert "--conf param 'days' is 40: expected at most 31" in bad.stderr
