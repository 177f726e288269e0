"""raftsched.airflow in-process: what an Airflow DAG compiles to (ids, edges, options, dates)
and the names it refuses with an alternative. The runs themselves: test_airflow_dags.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pendulum
import pytest

from raftsched.airflow import DAG, NotSupportedError
from raftsched.airflow.decorators import dag, task
from raftsched.airflow.models.param import Param
from raftsched.airflow.operators.bash import BashOperator
from raftsched.airflow.operators.empty import EmptyOperator
from raftsched.airflow.utils.edgemodifier import Label
from raftsched.airflow.utils.state import DagRunState
from raftsched.airflow.utils.task_group import TaskGroup
from raftsched.airflow.utils.trigger_rule import TriggerRule
from raftsched.dags import template_names
from raftsched.dags.templating import template_context
from raftsched.errors import DagDefinitionError

START = datetime(2024, 1, 1)


def upstream(spec, task_id: str) -> set[str]:
    return set(next(t for t in spec.tasks if t.task_id == task_id).upstream)


def test_groups_prefix_ids_and_link_their_roots_and_leaves() -> None:
    with DAG("g", schedule=None, start_date=START) as d:
        start = EmptyOperator(task_id="start")
        with TaskGroup("one") as one:
            a = EmptyOperator(task_id="a")
            with TaskGroup("inner") as inner:
                EmptyOperator(task_id="b")
            a >> inner
        with TaskGroup("two") as two:
            EmptyOperator(task_id="c")
            EmptyOperator(task_id="d")
        end = EmptyOperator(task_id="end")
        start >> one >> two
        two >> Label("done") >> end
    spec = d.to_spec()
    assert {t.task_id for t in spec.tasks} == {
        "start", "one.a", "one.inner.b", "two.c", "two.d", "end"
    }  # fmt: skip
    assert upstream(spec, "one.a") == {"start"}  # the group's root only
    assert upstream(spec, "one.inner.b") == {"one.a"}
    assert upstream(spec, "two.c") == upstream(spec, "two.d") == {"one.inner.b"}  # leaves
    assert upstream(spec, "end") == {"two.c", "two.d"}


def test_default_args_reach_every_task_and_email_settings_are_accepted() -> None:
    with DAG(
        "d",
        schedule=None,
        start_date=START,
        default_args={
            "owner": "data",
            "email": ["a@example.com"],
            "email_on_failure": True,
            "retries": 2,
            "execution_timeout": timedelta(minutes=3),
            "trigger_rule": TriggerRule.ALL_DONE,
            "priority_weight": 7,
        },
    ) as d:
        BashOperator(task_id="b", bash_command="true", retries=0)

        @task
        def p() -> None: ...

        p()
    specs = {t.task_id: t for t in d.to_spec().tasks}
    assert (specs["b"].retries, specs["p"].retries) == (0, 2)
    for spec in specs.values():
        assert spec.execution_timeout_seconds == 180
        assert spec.trigger_rule == "all_done"
        assert spec.priority_weight == 7
    assert specs["b"].skip_on_exit_code == 99  # Airflow's BashOperator default


def test_a_task_groups_default_args_apply_inside_it() -> None:
    with DAG("gd", schedule=None, start_date=START, default_args={"retries": 1}) as d:
        with TaskGroup("g", default_args={"retries": 4, "queue": "io"}):
            with TaskGroup("inner", default_args={"retries": 5}):
                EmptyOperator(task_id="deep")
            EmptyOperator(task_id="a")
        EmptyOperator(task_id="out")
    specs = {t.task_id: t for t in d.to_spec().tasks}
    assert (specs["g.inner.deep"].retries, specs["g.inner.deep"].queue) == (5, "io")
    assert (specs["g.a"].retries, specs["out"].retries) == (4, 1)


def test_depends_on_past_and_friends_from_task_and_default_args() -> None:
    args = {"depends_on_past": True, "ignore_first_depends_on_past": True}
    with DAG("past", schedule="@daily", start_date=START, default_args=args) as d:
        a = BashOperator(task_id="a", bash_command="true")
        b = BashOperator(task_id="b", bash_command="true", wait_for_downstream=True)
        c = BashOperator(task_id="c", bash_command="true", depends_on_past=False)

        @task(depends_on_past=True, ignore_first_depends_on_past=False)
        def t() -> None:
            pass

        a >> b >> c >> t()
    specs = {x.task_id: x.past_deps for x in d.to_spec().tasks}
    assert specs == {"a": "past", "b": "downstream", "c": "", "t": "past_strict"}


@pytest.mark.parametrize(
    ("build", "says"),
    [
        (lambda: TriggerRule.ALWAYS, "ALL_DONE"),
        (lambda: task.virtualenv, "install the packages"),
        (lambda: __import__("raftsched.airflow.models", fromlist=["Pool"]).Pool, "pools set"),
        (lambda: __import__("raftsched.airflow.models").airflow.models.Variable.set("a", 1), "set"),
    ],
)
def test_unsupported_names_say_what_to_use_instead(build, says: str) -> None:
    with DAG("u", schedule=None, start_date=START), pytest.raises(NotSupportedError, match=says):
        build()


def test_sensors_fail_at_import_with_an_alternative() -> None:
    with pytest.raises(ImportError, match="retries= and retry_delay= to poll"):
        from raftsched.airflow.providers.standard.sensors.python import PythonSensor  # noqa: F401


def test_trigger_dagrun_compiles_to_a_trigger_task_with_its_wait_and_reset() -> None:
    from raftsched.airflow.operators.trigger_dagrun import TriggerDagRunOperator
    from raftsched.airflow.providers.standard.operators import trigger_dagrun

    assert trigger_dagrun.TriggerDagRunOperator is TriggerDagRunOperator
    with DAG("ctl", schedule=None, start_date=START) as d:
        TriggerDagRunOperator(
            task_id="go",
            trigger_dag_id="target",
            conf={"x": "{{ ds }}"},
            logical_date=datetime(2024, 5, 1, tzinfo=UTC),
        )
    (spec,) = d.to_spec().tasks
    assert (spec.kind, spec.trigger_dagrun) == ("python", True)
    request = json.loads(spec.kwargs_json)["request"]
    assert request["trigger_dag_id"] == "target"
    assert request["logical_date"] == "2024-05-01T00:00:00+00:00"
    assert "wait_for_completion" not in request and "reset_dag_run" not in request
    with DAG("ctl2", schedule=None, start_date=START) as d2:
        TriggerDagRunOperator(
            task_id="go",
            trigger_dag_id="t",
            reset_dag_run=True,
            wait_for_completion=True,
            poke_interval=timedelta(seconds=5),
            allowed_states=[DagRunState.SUCCESS, "failed"],
            failed_states=[],
            deferrable=False,  # the wait defers all the same (no slot held)
        )
    request = json.loads(d2.to_spec().tasks[0].kwargs_json)["request"]
    assert request["reset_dag_run"] is True and request["wait_for_completion"] is True
    assert (request["poke_interval"], request["allowed_states"]) == (5.0, ["failed", "success"])
    assert request["failed_states"] == []
    assert (
        "allowed_states"
        not in json.loads(_trigger_spec(wait_for_completion=True).kwargs_json)["request"]
    )  # Airflow's defaults, applied by the core
    for bad, says in (
        ({"poke_interval": 0.1}, "poke_interval must be 1..86400"),
        ({"allowed_states": ["done"]}, "may name run states"),
        ({"failed_states": ["success", "up_for_retry"]}, "up_for_retry"),
    ):
        with pytest.raises(DagDefinitionError, match=says):
            _trigger_spec(wait_for_completion=True, **bad)


def _trigger_spec(**kw: Any) -> Any:
    from raftsched.airflow.operators.trigger_dagrun import TriggerDagRunOperator

    with DAG("ctl3", schedule=None, start_date=START) as d:
        TriggerDagRunOperator(task_id="go", trigger_dag_id="t", **kw)
    return d.to_spec().tasks[0]


def test_an_unknown_task_argument_is_an_error() -> None:
    with (
        DAG("k", schedule=None, start_date=START),
        pytest.raises(DagDefinitionError, match="bogus"),
    ):
        BashOperator(task_id="x", bash_command="true", bogus=1)


def test_dag_function_arguments_are_refused_for_params() -> None:
    @dag(schedule=None, start_date=START)
    def with_args(x: int = 1) -> None: ...

    with pytest.raises(NotSupportedError, match="params"):
        with_args()


def test_param_defaults_are_checked_with_jsonschema() -> None:
    with pytest.raises(ValueError, match="does not match"):
        Param("nope", type="string", pattern="^[0-9]+$")
    with pytest.raises(DagDefinitionError, match="schema is invalid"):
        Param(1, type="integer", minimum="one")


def test_a_pendulum_start_date_gives_the_dag_its_zone() -> None:
    d = DAG("p", schedule="@daily", start_date=pendulum.datetime(2024, 1, 1, tz="Europe/Berlin"))
    assert d.timezone == "Europe/Berlin"
    assert d.start_date == datetime(2023, 12, 31, 23, 0, tzinfo=UTC)


# -- dates --------------------------------------------------------------------------------


def test_cron_by_default_keeps_the_scheduled_time_as_logical_date() -> None:
    d = DAG("c3", schedule="@daily", start_date=START)
    assert template_names.MARKER not in d.task_env_extra
    assert d.start_date == datetime(2024, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "extra", "first_run"),
    [
        ("@daily", {"create_cron_data_intervals": True}, datetime(2024, 1, 2, tzinfo=UTC)),
        (timedelta(hours=6), {}, datetime(2024, 1, 1, 6, tzinfo=UTC)),
    ],
)
def test_data_interval_dates_start_one_period_on_and_mark_the_tasks(
    schedule, extra, first_run
) -> None:
    with DAG("c2", schedule=schedule, start_date=START, **extra) as d:
        EmptyOperator(task_id="t")
    assert d.start_date == first_run  # its interval starts at START: logical date START
    (spec,) = d.to_spec().tasks
    assert (template_names.MARKER, template_names.INTERVAL_START) in spec.env


AIRFLOW2 = ((template_names.MARKER, template_names.INTERVAL_START),)


@pytest.mark.parametrize(
    ("env", "ds", "next_ds"),
    [((), "2024-03-02", None), (AIRFLOW2, "2024-03-01", "2024-03-02")],
)
def test_templates_follow_the_convention_the_task_spec_asks_for(env, ds, next_ds) -> None:
    context = template_context(
        dag_id="d",
        run_id="r",
        task_id="t",
        try_number=1,
        logical_date="2024-03-02T00:00:00+00:00",
        data_interval_start="2024-03-01T00:00:00+00:00",
        data_interval_end="2024-03-02T00:00:00+00:00",
        conf={},
        task_env=env,
    )
    assert context["ds"] == ds
    assert context["logical_date"].isoformat()[:10] == ds
    assert context.get("next_ds") == next_ds
    assert context["macros"].ds_add(ds, 1) > ds


def test_the_task_page_shows_declared_variables_masked() -> None:
    from raftsched.dags.templating import render_for_display

    with DAG("v", schedule=None, start_date=START) as d:
        BashOperator(task_id="b", bash_command="echo {{ var.value.token }} {{ ds }}")
    (spec,) = d.to_spec().tasks
    assert ("RAFTSCHED_SECRETS", "var:token") in spec.env
    shown = render_for_display(
        spec,
        dag_id="v",
        run_id="r",
        try_number=1,
        logical_date=datetime(2024, 3, 2, tzinfo=UTC),
        data_interval_start=None,
        data_interval_end=None,
        conf={},
        params_json="",
    )
    assert shown["command"] == "echo *** 2024-03-02"


def test_a_task_declares_the_variables_its_templates_name_and_those_it_lists() -> None:
    with DAG("s", schedule=None, start_date=START) as d:
        BashOperator(
            task_id="b",
            bash_command="echo {{ var.value.a }} {{ var.json.b.x }}",
            env={"C": "{{ var.value.get('c', 1) }}"},
            secrets=["listed"],
            connections=["db"],
        )

        @task
        def f(x: str) -> None: ...

        f("{{ var.value.k }}")
        f("plain")
    env = {t.task_id: dict(t.env) for t in d.to_spec().tasks}
    assert env["b"]["RAFTSCHED_SECRETS"] == "var:a,var:b,var:c,var:listed,conn:db"
    assert env["f"]["RAFTSCHED_SECRETS"] == "var:k"
    assert "RAFTSCHED_SECRETS" not in env["f__1"]


def test_the_task_page_names_the_upstream_values_a_template_pulls() -> None:
    from raftsched.dags.templating import render_for_display, template_context

    with DAG("x", schedule=None, start_date=START) as d:
        up = EmptyOperator(task_id="up")
        b = BashOperator(task_id="b", bash_command="echo {{ ti.xcom_pull('up')['n'] }}")
        up >> b
    spec = next(t for t in d.to_spec().tasks if t.task_id == "b")
    dates = dict(logical_date=None, data_interval_start=None, data_interval_end=None)
    shown = render_for_display(
        spec, dag_id="x", run_id="r", try_number=1, conf={}, params_json="", **dates
    )
    assert shown["command"] == "echo (the return value of up['n'])"
    context = template_context(
        dag_id="x", run_id="r", task_id="b", try_number=1, conf={}, **dates,
        upstream_results={"up": '{"n": 4}'},
    )  # fmt: skip
    assert context["ti"].xcom_pull("up") == {"n": 4}
    with pytest.raises(KeyError, match="make 'other' upstream of 'b'"):
        context["ti"].xcom_pull(task_ids="other")


def test_only_this_layers_python_tasks_get_the_upstream_values_for_xcom_pull() -> None:
    from raftsched import task as native_task

    with DAG("m", schedule=None, start_date=START) as d:

        @native_task
        def a() -> int:
            return 1

        @native_task
        def b() -> None: ...

        @task
        def c() -> None: ...

        out = a()
        out >> b()
        out >> c()
    kwargs = {t.task_id: t.kwargs_json for t in d.to_spec().tasks}
    assert kwargs["b"] == "{}"  # a native function would not expect the extra argument
    assert kwargs["c"] == '{"__airflow_upstream__":{"a":{"__raftsched_xcom__":"a"}}}'


def test_pool_and_pool_slots_reach_the_spec_from_arguments_and_default_args() -> None:
    from raftsched.airflow.operators.python import PythonOperator

    args = {"pool": "etl", "pool_slots": 2}
    with DAG("p", schedule=None, start_date=START, default_args=args) as d:
        BashOperator(task_id="a", bash_command="true")
        BashOperator(task_id="b", bash_command="true", pool="default_pool", pool_slots=1)
        PythonOperator(task_id="c", python_callable=print, pool="io")

        @task(pool="gpu", pool_slots=3)
        def tf() -> None:
            pass

        tf()
    specs = {t.task_id: (t.pool, t.pool_slots) for t in d.to_spec().tasks}
    assert specs == {"a": ("etl", 2), "b": ("", 1), "c": ("io", 2), "tf": ("gpu", 3)}
    with DAG("q", schedule=None, start_date=START), pytest.raises(DagDefinitionError, match="pool"):
        BashOperator(task_id="x", bash_command="true", pool_slots=0)
