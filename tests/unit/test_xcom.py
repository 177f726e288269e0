"""XCom, branching and skips in the state machine (core/xcom.py, core/ready.py), the result
file and argument placeholders of the task side (dags/xcom_args.py), and TaskFlow authoring."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_state_harness import Sim, dag, run_id, task

from raftsched.core import commands as c
from raftsched.core import results as r
from raftsched.core import xcom
from raftsched.core.model import TaskKey, TaskState, TriggerRule
from raftsched.core.ready import UpstreamCounts, Verdict, evaluate_trigger
from raftsched.core.state import SchedulerState
from raftsched.dags import xcom_args
from raftsched.dags.authoring import DAG, BashTask, collect_dags
from raftsched.dags.authoring import dag as dag_decorator
from raftsched.dags.authoring import task as tf
from raftsched.errors import DagDefinitionError, XComError


def _grant(sim: Sim, task_id: str) -> Any:
    grants = sim.lease(n=100)
    wanted = [g for g in grants if g.lease.key.task_id == task_id]
    others = tuple(c.LeaseRef(g.lease.key, g.lease.token) for g in grants if g not in wanted)
    if others:
        sim.apply(
            c.ReleaseLeases(
                request_id=sim.rid(), now=wanted[0].lease.expires_at, worker_id="w1", leases=others
            )
        )
    return wanted[0]


def chain_sim() -> Sim:
    sim = Sim()
    sim.register(dag("d", task("a"), task("b", "a"), task("c", "b")))
    sim.create("d")
    return sim


# -- the return value: kept, replicated, handed on, cleared -----------------------------------


def test_a_return_value_is_kept_handed_downstream_and_survives_a_snapshot() -> None:
    sim = chain_sim()
    assert sim.complete(_grant(sim, "a"), result_json='{"rows":3}').ok
    assert sim.ti("a").result_json == '{"rows":3}'
    key_b = TaskKey("d", run_id(), "b")
    assert xcom.upstream_results(sim.state, key_b) == {"a": '{"rows":3}'}
    rows = [row for row in sim.outbox("task_instance") if row["task_id"] == "a"]
    assert rows[-1]["state"] == "success" and rows[-1]["result_json"] == '{"rows":3}'
    # every replica has it: a restored snapshot too, with the same digest
    restored = SchedulerState.restore(json.loads(json.dumps(sim.state.snapshot())))
    assert restored.digest() == sim.state.digest() == sim.state.recompute_digest()
    assert xcom.upstream_results(restored, key_b) == {"a": '{"rows":3}'}


def test_a_task_without_a_return_value_leaves_rows_and_digests_as_before() -> None:
    sim = chain_sim()
    sim.run_task("a")
    assert sim.ti("a").result_json is None
    assert all("result_json" not in row for row in sim.outbox("task_instance"))
    assert "result_json" not in json.dumps(sim.state.snapshot())


def test_clearing_a_task_drops_its_return_value() -> None:
    sim = chain_sim()
    sim.complete(_grant(sim, "a"), result_json="42")
    sim.run_task("b")
    sim.run_task("c")
    cleared = sim.apply(
        c.ClearTasks(
            request_id=sim.rid(),
            now=sim.ti("c").end_date,
            dag_id="d",
            run_id=run_id(),
            task_ids=("a",),
        )
    )
    assert cleared.ok
    assert sim.ti("a").result_json is None
    assert xcom.upstream_results(sim.state, TaskKey("d", run_id(), "b")) == {}
    assert sim.state.digest() == sim.state.recompute_digest()


@pytest.mark.parametrize("taskflow", [True, False])
def test_the_run_bound_fails_a_taskflow_attempt_and_drops_a_classic_value(taskflow: bool) -> None:
    sim = Sim()
    name = "@taskflow:d:{}" if taskflow else "fn_{}"
    tasks = [
        replace(task(f"t{i}"), kind="python", command=None, callable_name=name.format(f"t{i}"))
        for i in range(20)
    ]
    sim.register(dag("d", *tasks))
    sim.create("d")
    big = json.dumps("x" * (xcom.MAX_XCOM_BYTES - 10))
    kept = 0
    for i in range(20):
        assert sim.complete(_grant(sim, f"t{i}"), result_json=big).ok
        ti = sim.ti(f"t{i}")
        if ti.result_json is not None:
            kept += 1
        elif taskflow:
            assert ti.state is TaskState.FAILED
            assert "per run" in ti.message and str(xcom.MAX_XCOM_BYTES_PER_RUN) in ti.message
        else:  # a classic PythonTask never fails for its return value
            assert ti.state is TaskState.SUCCESS
    assert kept == xcom.MAX_XCOM_BYTES_PER_RUN // len(big)
    assert xcom.run_total(sim.state.run_table.get("d", run_id())) <= xcom.MAX_XCOM_BYTES_PER_RUN


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("x" * 10, "not valid JSON"),
        (json.dumps("y" * xcom.MAX_XCOM_BYTES), "limit is"),
        ("[" * 100 + "]" * 100, "nested deeper"),
        ("NaN", "JSON"),
        ('"a\\u0000b"', "NUL"),
    ],
)
def test_a_bad_return_value_is_refused_before_anything_changes(text: str, problem: str) -> None:
    sim = chain_sim()
    grant = _grant(sim, "a")
    result = sim.complete(grant, result_json=text)
    assert result.reason == r.INVALID and problem in str(result.value)
    assert sim.ti("a").state is TaskState.RUNNING


# -- branches and skips -------------------------------------------------------------------


def branch_sim(join_rule: str = "none_failed_min_one_success") -> Sim:
    """pick -> (left, right); left -> after_left; (left, right) -> join."""
    sim = Sim()
    sim.register(
        dag(
            "d",
            task("pick"),
            task("left", "pick"),
            task("right", "pick"),
            task("after_left", "left"),
            task("join", "left", "right", trigger_rule=join_rule),
        )
    )
    sim.create("d")
    return sim


def test_a_branch_skips_the_direct_downstream_it_does_not_follow() -> None:
    sim = branch_sim()
    assert sim.complete(_grant(sim, "pick"), result_json='"right"', follow=("right",)).ok
    assert sim.states() == {
        "pick": "success",
        "left": "skipped",
        "right": "queued",
        "after_left": "skipped",  # all_success with a skipped upstream
        "join": "none",
    }
    sim.run_task("right")
    assert sim.states()["join"] == "queued"  # none_failed_min_one_success
    sim.run_task("join")
    assert sim.run().state == "success"


def test_a_branch_to_a_task_not_directly_downstream_fails_the_attempt() -> None:
    sim = branch_sim()
    sim.complete(_grant(sim, "pick"), follow=("join",))
    assert sim.ti("pick").state is TaskState.FAILED
    assert "not directly downstream" in sim.ti("pick").message


def test_a_branch_that_follows_nothing_skips_everything_after_it() -> None:
    sim = branch_sim("all_done")
    sim.complete(_grant(sim, "pick"), follow=())
    states = sim.states()
    assert states["left"] == states["right"] == states["after_left"] == "skipped"
    assert states["join"] == "queued"  # all_done runs after skips too


def test_a_skipped_attempt_closes_its_own_row_and_skips_downstream() -> None:
    sim = chain_sim()
    grant = _grant(sim, "a")
    assert sim.complete(grant, exit_code=99, message="skipped: exit code 99", skipped=True).ok
    assert sim.states() == {"a": "skipped", "b": "skipped", "c": "skipped"}
    rows = [row for row in sim.outbox("task_instance") if row["task_id"] == "a"]
    assert rows[-1]["try_number"] == 1 and rows[-1]["state"] == "skipped"
    assert rows[-1]["exit_code"] == 99 and rows[-1]["worker_id"] == "w1"
    assert sim.run().state == "success"
    assert sim.state.digest() == sim.state.recompute_digest()


# -- trigger rules with skips (Airflow's) -------------------------------------------------


def _verdict(rule: str, **counts: int) -> Verdict:
    states = [TaskState(name) for name, n in counts.items() for _ in range(n)]
    return evaluate_trigger(TriggerRule(rule), UpstreamCounts.of(states))


@pytest.mark.parametrize(
    ("rule", "counts", "verdict"),
    [
        ("all_success", {"success": 1, "skipped": 1}, Verdict.SKIPPED),
        ("none_failed_min_one_success", {"success": 1, "skipped": 1}, Verdict.READY),
        ("none_failed_min_one_success", {"skipped": 2}, Verdict.SKIPPED),
        ("none_failed_min_one_success", {"success": 1, "failed": 1}, Verdict.UPSTREAM_FAILED),
        ("none_failed_min_one_success", {"success": 1, "none": 1}, Verdict.WAIT),
        ("all_skipped", {"skipped": 2}, Verdict.READY),
        ("all_skipped", {"skipped": 1, "success": 1}, Verdict.SKIPPED),
        ("all_skipped", {"skipped": 1, "none": 1}, Verdict.WAIT),
        ("none_skipped", {"success": 1, "failed": 1}, Verdict.READY),
        ("none_skipped", {"success": 1, "skipped": 1}, Verdict.SKIPPED),
        ("none_skipped", {"success": 1, "running": 1}, Verdict.WAIT),
        ("none_failed", {"skipped": 2}, Verdict.READY),
    ],
)
def test_trigger_rules_treat_skips_as_airflow(rule: str, counts: dict, verdict: Verdict) -> None:
    assert _verdict(rule, **counts) is verdict


# -- the task side: placeholders and the result file --------------------------------------


def test_placeholders_resolve_to_upstream_values_and_items() -> None:
    kwargs = {
        "whole": xcom_args.placeholder("a"),
        "item": xcom_args.placeholder("a", ("rows", 1)),
        "nested": [xcom_args.placeholder("b"), {"k": 1}],
        "missing": xcom_args.placeholder("c"),
    }
    got = xcom_args.resolve(kwargs, {"a": '{"rows":[5,6]}', "b": '"text"'})
    assert got == {
        "whole": {"rows": [5, 6]},
        "item": 6,
        "nested": ["text", {"k": 1}],
        "missing": None,
    }
    with pytest.raises(XComError, match="has no item 'nope'"):
        xcom_args.resolve({"x": xcom_args.placeholder("a", ("nope",))}, {"a": "{}"})


def test_a_return_value_past_the_bound_fails_a_taskflow_task_and_warns_a_classic_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    big = "z" * (xcom.MAX_XCOM_BYTES + 1)
    with pytest.raises(XComError, match=f"limit is {xcom.MAX_XCOM_BYTES} bytes"):
        xcom_args.encode_return_value(big, strict=True)
    with pytest.raises(XComError, match="not JSON-serializable"):
        xcom_args.encode_return_value({1, 2}, strict=True)
    assert xcom_args.encode_return_value(object(), strict=False) == ""
    assert "not kept" in capsys.readouterr().err
    assert xcom_args.encode_return_value({"a": [1, None]}, strict=True) == '{"a":[1,null]}'


def test_the_result_file_round_trips_and_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "result.json"
    monkeypatch.setenv(xcom_args.RESULT_FILE_ENV, str(path))
    xcom_args.write_result('{"n":1}', ["b"])
    assert xcom_args.read_result(str(path)) == ('{"n":1}', ("b",), False)
    assert xcom_args.read_result(str(tmp_path / "none.json")) == ("", None, False)
    path.write_text(json.dumps({"return_value_json": json.dumps("q" * xcom.MAX_XCOM_BYTES)}))
    with pytest.raises(XComError, match="limit is"):
        xcom_args.read_result(str(path))


def test_branch_return_values() -> None:
    assert xcom_args.branch_follow("a") == ["a"]
    assert xcom_args.branch_follow(["b", "a", "b"]) == ["a", "b"]
    assert xcom_args.branch_follow(None) == []
    with pytest.raises(XComError):
        xcom_args.branch_follow(3)


# -- TaskFlow authoring -------------------------------------------------------------------


def test_taskflow_wires_dependencies_and_placeholders() -> None:
    @dag_decorator(schedule=None)
    def flow() -> None:
        @tf
        def extract() -> dict:
            return {"rows": [1, 2]}

        @tf(retries=2)
        def load(rows: list, label: str = "x") -> None:
            return None

        @tf.branch
        def choose(data: dict) -> str:
            return "load"

        data = extract()
        choose(data) >> load(data["rows"], label="y")
        load.override(task_id="again")(data["rows"]) >> BashTask("done", command="echo")

    with collect_dags() as found:
        built = flow()
    assert found == [built]
    spec = built.to_spec()
    by_id = {t.task_id: t for t in spec.tasks}
    assert set(by_id) == {"extract", "load", "choose", "again", "done"}
    assert by_id["load"].upstream == ("choose", "extract") and by_id["load"].retries == 2
    assert json.loads(by_id["load"].kwargs_json) == {
        "rows": {"__raftsched_xcom__": "extract", "path": ["rows"]},
        "label": "y",
    }
    assert by_id["choose"].callable_name == "@taskflow:flow:choose"
    assert by_id["done"].upstream == ("again",)
    from raftsched.dags.task_checks import resolve_callable

    fn = resolve_callable({}, "@taskflow:flow:choose")
    assert fn is not None and fn.branch and fn(data={}) == "load"


def test_taskflow_mistakes_are_definition_errors() -> None:
    @tf
    def alone(x: Any = None) -> None:
        return None

    with pytest.raises(DagDefinitionError, match="outside a DAG"):
        alone()
    with DAG("d1", schedule=None), pytest.raises(DagDefinitionError, match="JSON"):
        alone(x=object())
    with DAG("d2", schedule=None):

        @tf
        def takes(x: Any) -> None:
            return None

        with pytest.raises(DagDefinitionError, match="argument"):
            takes(y=1)  # type: ignore[call-arg]
    with pytest.raises(DagDefinitionError, match="skip_on_exit_code"), DAG("d3", schedule=None):
        BashTask("b", command="exit 3", skip_on_exit_code=0)


def test_the_worker_reads_the_outcome_a_bash_skip_code_and_the_result_file(tmp_path: Path) -> None:
    from raftsched.worker import results
    from raftsched.worker.runner import Outcome
    from raftsched.worker.transport import Assignment

    key = TaskKey("d", "r", "t")
    bash = Assignment(key=key, token=1, try_number=1, kind="bash", skip_on_exit_code=99)
    skipped = results.settle_outcome(Outcome(False, 99, "exit code 99"), bash, str(tmp_path))
    assert skipped.success and skipped.skipped and skipped.results() == {"skipped": True}
    failed = results.settle_outcome(Outcome(False, 98, "exit code 98"), bash, str(tmp_path))
    assert not failed.success and failed.results() == {}

    python = Assignment(
        key=key,
        token=1,
        try_number=1,
        kind="python",
        kwargs={"n": xcom_args.placeholder("up", ("n",))},
        upstream_results={"up": '{"n": 4}'},
    )
    assert results.with_upstream_results(python).kwargs == {"n": 4}
    env = results.result_env(python, str(tmp_path))
    Path(env[xcom_args.RESULT_FILE_ENV]).write_text(
        json.dumps({"return_value_json": "[1]", "follow": ["a"], "skipped": False})
    )
    done = results.settle_outcome(Outcome(True, 0, ""), python, str(tmp_path))
    assert done.results() == {"result_json": "[1]", "follow": ("a",)}


def test_a_return_value_masked_past_its_bound_is_not_kept(tmp_path: Path) -> None:
    from raftsched.worker import results
    from raftsched.worker.runner import Outcome
    from raftsched.worker.transport import Assignment

    # 64,004 bytes: it fits; each 4829 masked as "***" takes one byte more
    pins = json.dumps(["x" * 44_000] + [4829] * 4_000, separators=(",", ":"))
    xcom.check_result_json("pins", pins)
    (tmp_path / xcom_args.RESULT_FILE_NAME).write_text(json.dumps({"return_value_json": pins}))
    for callable_name, fails in (("@taskflow:d:t", True), ("classic_fn", False)):
        a = Assignment(
            key=TaskKey("d", "r", "t"),
            token=1,
            try_number=1,
            kind="python",
            callable_name=callable_name,
            secret_env=(("RAFTSCHED_VAR_PIN", "4829"),),
        )
        done = results.settle_outcome(Outcome(True, 0, ""), a, str(tmp_path))
        assert done.success is not fails and done.result_json == ""  # the cluster refuses it
        assert done.message.startswith("the return value cannot be kept once masked: ")
        assert "4829" not in done.message
