"""The authoring API: DAG, BashTask, PythonTask, dependencies, specs and every validation."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest

from raftsched import DAG, BashTask, PythonTask
from raftsched.core.model import DagSpec, ScheduleKind, TriggerRule
from raftsched.dags.authoring import collect_dags
from raftsched.errors import DagDefinitionError


def transform(n: int) -> int:
    return n * 2


class Helpers:
    @staticmethod
    def shout(text: str) -> None:
        print(text.upper())


def dag(dag_id: str = "etl", **kw) -> DAG:
    kw.setdefault("schedule", "@daily")
    kw.setdefault("start_date", datetime(2024, 1, 1))
    return DAG(dag_id, **kw)


# -- building specs -------------------------------------------------------------------------


def test_spec_is_sorted_hashed_and_round_trips() -> None:
    with dag("etl", timezone="Europe/Berlin", tags=["b", "a", "b"], description="d") as d:
        load = BashTask("load", command="echo load", env={"Z": "1", "A": "2"})
        extract = BashTask(task_id="extract", command="echo extract", retries=2)
        clean = PythonTask("clean", fn=transform, kwargs={"n": 3}, trigger_rule="all_done")
        extract >> clean >> load
        extract >> load
    spec = d.to_spec(fileloc="/dags/etl.py")
    assert [t.task_id for t in spec.tasks] == ["clean", "extract", "load"]
    assert spec.task("load").upstream == ("clean", "extract")
    assert spec.task("load").env == (("A", "2"), ("Z", "1"))
    assert spec.task("clean").callable_name == "transform"
    assert spec.task("clean").kwargs_json == '{"n":3}'
    assert spec.task("clean").trigger_rule is TriggerRule.ALL_DONE
    assert spec.task("extract").retries == 2
    assert spec.tags == ("a", "b")
    assert spec.fileloc == "/dags/etl.py"
    assert spec.spec_hash == spec.compute_hash() != ""
    assert DagSpec.from_dict(spec.to_dict()) == spec
    # A naive start_date is wall-clock time in the DAG's zone, stored as aware UTC.
    assert spec.start_date == datetime(2023, 12, 31, 23, 0, tzinfo=UTC)


def test_hash_is_stable_and_changes_with_content() -> None:
    def build(command: str) -> DagSpec:
        with dag("h") as d:
            BashTask("a", command=command)
        return d.to_spec(fileloc="x.py")

    assert build("echo 1").spec_hash == build("echo 1").spec_hash
    assert build("echo 1").spec_hash != build("echo 2").spec_hash


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a >> b", {"b": {"a"}}),
        ("a << b", {"a": {"b"}}),
        ("a >> [b, c]", {"b": {"a"}, "c": {"a"}}),
        ("[a, b] >> c", {"c": {"a", "b"}}),
        ("[a, b] << c", {"a": {"c"}, "b": {"c"}}),
        ("a >> b >> c", {"b": {"a"}, "c": {"b"}}),
        ("a << b << c", {"a": {"b"}, "b": {"c"}}),
        ("a >> [b, c] >> d", {"b": {"a"}, "c": {"a"}, "d": {"b", "c"}}),
        ("a.set_downstream(b); c.set_upstream(b)", {"b": {"a"}, "c": {"b"}}),
    ],
)
def test_dependency_operators(expression: str, expected: dict[str, set[str]]) -> None:
    with dag() as d:
        tasks = {name: BashTask(name, command="true") for name in "abcd"}
        exec(expression, {}, tasks)
    got = {tid: t.upstream for tid, t in d.tasks.items() if t.upstream}
    assert got == expected


def test_chain_returns_the_right_operand() -> None:
    with dag():
        a, b, c = (BashTask(n, command="true") for n in "abc")
        assert (a >> b) is b
        assert (a >> [b, c]) == [b, c]
        assert ([a, b] >> c) is c


def test_dag_keyword_and_defaults_from_dag() -> None:
    d = dag("k", default_retries=3, default_retry_delay=timedelta(seconds=10))
    task = BashTask("t", command="true", dag=d, execution_timeout=timedelta(minutes=1))
    spec = d.to_spec().task("t")
    assert (spec.retries, spec.retry_delay_seconds, spec.execution_timeout_seconds) == (
        3,
        10.0,
        60.0,
    )
    assert task.dag is d


@pytest.mark.parametrize(
    ("schedule", "kind", "cron", "seconds", "display"),
    [
        ("@daily", ScheduleKind.CRON, "0 0 * * *", None, "@daily"),
        ("@midnight", ScheduleKind.CRON, "0 0 * * *", None, "@midnight"),
        ("@hourly", ScheduleKind.CRON, "0 * * * *", None, "@hourly"),
        ("@weekly", ScheduleKind.CRON, "0 0 * * 0", None, "@weekly"),
        ("@monthly", ScheduleKind.CRON, "0 0 1 * *", None, "@monthly"),
        ("@yearly", ScheduleKind.CRON, "0 0 1 1 *", None, "@yearly"),
        ("@annually", ScheduleKind.CRON, "0 0 1 1 *", None, "@annually"),
        ("@once", ScheduleKind.ONCE, None, None, "@once"),
        ("*/5  * * * *", ScheduleKind.CRON, "*/5 * * * *", None, "*/5 * * * *"),
        ("* * * * * */10", ScheduleKind.CRON, "* * * * * */10", None, "* * * * * */10"),
        (timedelta(hours=1, minutes=30), ScheduleKind.INTERVAL, None, 5400,
         "timedelta(hours=1, minutes=30)"),
        (None, ScheduleKind.NONE, None, None, "None"),
    ],
)  # fmt: skip
def test_schedules(schedule, kind, cron, seconds, display) -> None:
    spec = dag(schedule=schedule).to_spec()
    assert (spec.schedule.kind, spec.schedule.cron, spec.schedule.interval_seconds) == (
        kind,
        cron,
        seconds,
    )
    assert spec.schedule.display == display


def test_dates_aware_date_and_end_date() -> None:
    d = dag(
        timezone="America/New_York",
        start_date=datetime(2024, 1, 1, 12, tzinfo=UTC),
        end_date=date(2024, 2, 1),
    )
    assert d.start_date == datetime(2024, 1, 1, 12, tzinfo=UTC)
    assert d.end_date == datetime(2024, 2, 1, 5, tzinfo=UTC)


def test_collect_dags_records_dags_built_inside() -> None:
    with collect_dags() as found:
        first = dag("one")
        with dag("two"):
            pass
    assert [d.dag_id for d in found] == ["one", "two"]
    assert first in found


# -- validation: every message --------------------------------------------------------------


def _bad_python_tasks() -> dict[str, object]:
    def nested() -> None:
        pass

    return {"lambda": lambda: None, "nested": nested}


CASES = [
    # (id, builder, exact message or regex, dag_id, task_id)
    ("dag-id-chars", lambda: dag("my dag!"),
     "invalid dag_id 'my dag!': ' !' not allowed; use letters, digits, '_', '.' and '-'",
     "", ""),
    ("dag-id-empty", lambda: dag(""),
     "invalid dag_id '': it must be 1 to 250 characters long (it has 0)", "", ""),
    ("dag-id-long", lambda: dag("x" * 251),
     re.compile(r"invalid dag_id 'x+': it must be 1 to 250 characters long \(it has 251\)"),
     "", ""),
    ("dag-id-type", lambda: dag(7), "dag_id must be a string, got int 7", "", ""),
    ("task-id-chars", lambda: BashTask("a/b", command="x", dag=dag()),
     "invalid task_id 'a/b': '/' not allowed; use letters, digits, '_', '.' and '-'",
     "etl", "a/b"),
    ("duplicate-task", lambda: [BashTask("a", command="x", dag=d) for d in [dag()] * 2],
     "duplicate task_id 'a' in DAG 'etl'", "etl", "a"),
    ("trigger-rule", lambda: BashTask("a", command="x", dag=dag(), trigger_rule="sometimes"),
     "unknown trigger_rule 'sometimes' for task 'a' in DAG 'etl'; allowed: all_success,"
     " all_done, all_failed, one_success, one_failed, none_failed,"
     " none_failed_min_one_success, all_skipped, none_skipped", "etl", "a"),
    ("cron-range", lambda: dag(schedule="61 * * * *"),
     "DAG 'etl': invalid cron expression '61 * * * *': [61 * * * *] is not acceptable,"
     " out of range", "etl", ""),
    ("cron-fields", lambda: dag(schedule="* * *"),
     "DAG 'etl': invalid cron expression '* * *': expected 5 fields (minute hour day month"
     " weekday) or 6 with seconds last, got 3", "etl", ""),
    ("cron-never", lambda: dag(schedule="0 0 30 2 *"),
     "DAG 'etl': invalid cron expression '0 0 30 2 *': it never matches a date", "etl", ""),
    ("preset", lambda: dag(schedule="@fortnightly"),
     "unknown schedule preset '@fortnightly' in DAG 'etl'; allowed: @once, @hourly, @daily,"
     " @midnight, @weekly, @monthly, @yearly, @annually", "etl", ""),
    ("schedule-type", lambda: dag(schedule=5),
     "schedule of DAG 'etl' must be a cron expression, a preset such as '@daily', '@once',"
     " a timedelta or None; got int 5", "etl", ""),
    ("interval-fraction", lambda: dag(schedule=timedelta(milliseconds=1500)),
     "schedule interval of DAG 'etl' must be a positive whole number of seconds,"
     " got datetime.timedelta(seconds=1, microseconds=500000)", "etl", ""),
    ("interval-negative", lambda: dag(schedule=timedelta(hours=-1)),
     re.compile(r"schedule interval of DAG 'etl' must be a positive whole number"), "etl", ""),
    ("zone-typo", lambda: dag(timezone="Europe/Berln"),
     "DAG 'etl': unknown time zone 'Europe/Berln': did you mean 'Europe/Berlin'?", "etl", ""),
    ("zone-unknown", lambda: dag(timezone="Mars/Olympus"),
     "DAG 'etl': unknown time zone 'Mars/Olympus': use an IANA name such as"
     " 'Europe/Berlin'", "etl", ""),
    ("end-before-start", lambda: dag(start_date=datetime(2024, 2, 1),
                                     end_date=datetime(2024, 1, 1)),
     "end_date 2024-01-01T00:00:00+00:00 of DAG 'etl' is before its start_date"
     " 2024-02-01T00:00:00+00:00", "etl", ""),
    ("start-type", lambda: dag(start_date="2024-01-01"),
     "start_date of DAG 'etl' must be a datetime, got str '2024-01-01'", "etl", ""),
    ("interval-needs-start", lambda: dag(schedule=timedelta(hours=1), start_date=None),
     "DAG 'etl' with schedule timedelta(hours=1) needs a start_date", "etl", ""),
    ("once-needs-start", lambda: dag(schedule="@once", start_date=None),
     "DAG 'etl' with schedule @once needs a start_date", "etl", ""),
    ("max-active-runs", lambda: dag(max_active_runs=0),
     "max_active_runs of DAG 'etl' must be an integer >= 1, got 0", "etl", ""),
    ("max-active-tasks", lambda: dag(max_active_tasks="4"),
     "max_active_tasks of DAG 'etl' must be an integer >= 1, got '4'", "etl", ""),
    ("default-retries", lambda: dag(default_retries=-1),
     "default_retries of DAG 'etl' must be an integer >= 0, got -1", "etl", ""),
    ("default-retry-delay", lambda: dag(default_retry_delay=timedelta(seconds=-5)),
     "default_retry_delay of DAG 'etl' must be zero or more, got -1 day, 23:59:55",
     "etl", ""),
    ("tags", lambda: dag(tags="etl"),
     "tags of DAG 'etl' must be a list of strings, got 'etl'", "etl", ""),
    ("retries", lambda: BashTask("a", command="x", dag=dag(), retries=-1),
     "retries of task 'a' in DAG 'etl' must be an integer >= 0, got -1", "etl", "a"),
    ("retry-delay-type", lambda: BashTask("a", command="x", dag=dag(), retry_delay="5m"),
     "retry_delay of task 'a' in DAG 'etl' must be a timedelta, got str '5m'", "etl", "a"),
    ("timeout-zero", lambda: BashTask("a", command="x", dag=dag(),
                                      execution_timeout=timedelta(0)),
     "execution_timeout of task 'a' in DAG 'etl' must be positive, got 0:00:00", "etl", "a"),
    ("max-retry-delay", lambda: BashTask("a", command="x", dag=dag(),
                                         max_retry_delay=timedelta(seconds=-1)),
     "max_retry_delay of task 'a' in DAG 'etl' must be zero or more, got -1 day, 23:59:59",
     "etl", "a"),
    ("priority", lambda: BashTask("a", command="x", dag=dag(), priority_weight=1.5),
     re.compile(r"priority_weight of task 'a' in DAG 'etl' must be an integer"), "etl", "a"),
    ("command", lambda: BashTask("a", command="  ", dag=dag()),
     "command of BashTask 'a' must be a non-empty string, got '  '", "etl", "a"),
    ("env", lambda: BashTask("a", command="x", dag=dag(), env={"N": 1}),
     "env of task 'a' must be a dict of str to str, got {'N': 1}", "etl", "a"),
    ("no-dag", lambda: BashTask("a", command="x"),
     "task 'a' belongs to no DAG: create it inside `with DAG(...):` or pass dag=", "", "a"),
    ("lambda", lambda: PythonTask("p", fn=_bad_python_tasks()["lambda"], dag=dag()),
     re.compile(r"fn of PythonTask 'p' is a lambda \(.*<lambda>\); workers import the DAG"
                r" file and look the function up by name, so define it with `def` at module"
                r" level"), "etl", "p"),
    ("nested", lambda: PythonTask("p", fn=_bad_python_tasks()["nested"], dag=dag()),
     re.compile(r"fn of PythonTask 'p' is a nested function \(_bad_python_tasks\.<locals>"
                r"\.nested\)"), "etl", "p"),
    ("not-callable", lambda: PythonTask("p", fn="transform", dag=dag()),
     "fn of PythonTask 'p' must be a function, got str", "etl", "p"),
    ("kwargs-json", lambda: PythonTask("p", fn=transform, dag=dag(),
                                       kwargs={"when": datetime(2024, 1, 1)}),
     "kwargs of PythonTask 'p' must be JSON-serializable: Object of type datetime is not"
     " JSON serializable", "etl", "p"),
    ("kwargs-keys", lambda: PythonTask("p", fn=transform, dag=dag(), kwargs={1: 2}),
     "kwargs of PythonTask 'p' must be a dict with str keys, got {1: 2}", "etl", "p"),
    ("cross-dag", lambda: BashTask("a", command="x", dag=dag("one"))
     >> BashTask("b", command="x", dag=dag("two")),
     "cannot link task 'a' of DAG 'one' to task 'b' of DAG 'two': tasks must share a DAG",
     "one", "a"),
    ("not-a-task", lambda: BashTask("a", command="x", dag=dag()) >> "b",
     "task 'a' can only depend on tasks or lists of tasks, got str 'b'", "etl", "a"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("build", "message", "dag_id", "task_id"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_validation_messages(build, message, dag_id: str, task_id: str) -> None:
    with pytest.raises(DagDefinitionError) as info:
        build()
    if isinstance(message, re.Pattern):
        assert message.fullmatch(str(info.value)) or message.match(str(info.value)), info.value
    else:
        assert str(info.value) == message
    assert (info.value.dag_id, info.value.task_id) == (dag_id, task_id)


@pytest.mark.parametrize(
    ("edges", "message"),
    [
        ([("a", "b"), ("b", "c"), ("c", "a")], "cycle in DAG 'etl': a -> b -> c -> a"),
        ([("a", "a")], "cycle in DAG 'etl': a -> a"),
        ([("x", "b"), ("b", "c"), ("c", "b")], "cycle in DAG 'etl': b -> c -> b"),
        ([("a", "b"), ("a", "c"), ("c", "d"), ("d", "a")], "cycle in DAG 'etl': a -> c -> d -> a"),
    ],
)
def test_cycles_are_named(edges: list[tuple[str, str]], message: str) -> None:
    with dag() as d:
        tasks = {n: BashTask(n, command="x") for n in sorted({n for e in edges for n in e})}
        for up, down in edges:
            tasks[up] >> tasks[down]
    with pytest.raises(DagDefinitionError) as info:
        d.to_spec()
    assert str(info.value) == message
    assert info.value.dag_id == "etl"


def test_static_method_callable_name() -> None:
    with dag() as d:
        PythonTask("p", fn=Helpers.shout)
    assert d.to_spec().task("p").callable_name == "Helpers.shout"
