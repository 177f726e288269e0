"""Deferral on the task side: TaskDeferred in a Python task's process (the result file the
worker reads), a resumed attempt calling its method with the event, and Airflow's sensors
(FileSensor, DateTimeSensorAsync, TimeDeltaSensor) deferring, rescheduling and timing out."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from raftsched.airflow import DAG
from raftsched.airflow.exceptions import AirflowSensorTimeout, AirflowSkipException
from raftsched.airflow.providers.standard.sensors.filesystem import FileSensor
from raftsched.airflow.sensors.date_time import DateTimeSensorAsync
from raftsched.airflow.sensors.time_delta import TimeDeltaSensor
from raftsched.dags import xcom_args
from raftsched.dags.deferral import (
    RESUME_KEY,
    DateTimeTrigger,
    FileTrigger,
    TaskDeferred,
    TimeDeltaTrigger,
)
from raftsched.dags.taskflow import registered_callable
from raftsched.errors import DagDefinitionError
from raftsched.worker import _run_python

START = datetime(2024, 1, 1, tzinfo=UTC)

DAG_FILE = """
from raftsched.dags.deferral import FileTrigger, defer

def wait(n):
    defer(FileTrigger("/nowhere/f", poke_interval=2), "done", {"n": n}, timeout=30)

def done(n, event):
    return {"n": n, "event": event}
"""


@pytest.fixture
def result_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / xcom_args.RESULT_FILE_NAME
    monkeypatch.setenv(xcom_args.RESULT_FILE_ENV, str(path))
    return path


def test_a_deferring_task_writes_its_deferral_and_resumes_with_the_event(
    tmp_path: Path, result_file: Path
) -> None:
    dag_file = tmp_path / "dag.py"
    dag_file.write_text(DAG_FILE)
    assert _run_python.call(None, str(dag_file), "wait", {"n": 3}) == 0
    deferral = xcom_args.read_deferral(str(result_file))
    assert deferral == {
        "kind": "file",
        "args_json": '{"filepath": "/nowhere/f", "poke_interval": 2.0, "stable_for": 0.0}',
        "method_name": "done",
        "kwargs_json": '{"n": 3}',
        "timeout_seconds": 30.0,
    }
    result_file.unlink()
    resume = {"method": "done", "kwargs": {"n": 3}, "event": {"size": 1}}
    assert _run_python.call(None, str(dag_file), "wait", {"n": 3, RESUME_KEY: resume}) == 0
    assert xcom_args.read_deferral(str(result_file)) is None
    text, _, _ = xcom_args.read_result(str(result_file))
    assert json.loads(text) == {"n": 3, "event": {"size": 1}}


def test_triggers_describe_themselves_and_refuse_a_fast_poke() -> None:
    assert DateTimeTrigger(START).args() == {"moment": "2024-01-01T00:00:00+00:00"}
    assert TimeDeltaTrigger(timedelta(hours=1)).moment > datetime.now(UTC)
    with pytest.raises(ValueError, match="poke_interval"):
        FileTrigger("/x", poke_interval=0.1).args()
    with pytest.raises(ValueError, match="aware"):
        DateTimeTrigger(datetime(2024, 1, 1)).args()


def _sensor(task_id: str) -> object:
    fn = registered_callable(f"@taskflow:s:{task_id}")
    assert fn is not None
    return fn


def test_file_sensor_deferrable_pokes_then_defers_and_returns_the_event(tmp_path: Path) -> None:
    target = tmp_path / "in.csv"
    with DAG("s", schedule=None, start_date=START) as d:
        FileSensor(task_id="f", filepath=str(target), poke_interval=5, deferrable=True)
    (spec,) = d.to_spec().tasks
    sensor = json.loads(spec.kwargs_json)["sensor"]
    run = _sensor("f")
    with pytest.raises(TaskDeferred) as deferred:
        run(sensor=sensor)
    assert deferred.value.to_dict()["kind"] == "file"
    assert deferred.value.method_name == spec.callable_name
    assert run(sensor=sensor, event={"path": str(target)}) == {"path": str(target)}
    target.write_text("x")
    assert run(sensor=sensor) is None  # there already: no deferral


def test_reschedule_mode_defers_on_time_until_its_deadline(tmp_path: Path) -> None:
    with DAG("s", schedule=None, start_date=START):
        FileSensor(
            task_id="r",
            filepath=str(tmp_path / "none"),
            poke_interval=2,
            timeout=60,
            mode="reschedule",
        )
        FileSensor(task_id="soft", filepath=str(tmp_path / "none"), timeout=1, soft_fail=True)
    run = _sensor("r")
    sensor = {
        "poke_interval": 2.0,
        "timeout": 60.0,
        "mode": "reschedule",
        "deferrable": False,
        "soft_fail": False,
        "args": {"filepath": str(tmp_path / "none")},
    }
    with pytest.raises(TaskDeferred) as deferred:
        run(sensor=sensor)
    assert deferred.value.trigger.kind == "time" and "deadline" in deferred.value.kwargs
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    with pytest.raises(AirflowSensorTimeout):
        run(sensor=sensor, event="now", deadline=past)
    with pytest.raises(AirflowSkipException):
        _sensor("soft")(sensor={**sensor, "soft_fail": True}, event="now", deadline=past)


def test_time_sensors(monkeypatch: pytest.MonkeyPatch) -> None:
    with DAG("s", schedule=None, start_date=START):
        DateTimeSensorAsync(task_id="dt", target_time=datetime(2999, 1, 1, tzinfo=UTC))
        TimeDeltaSensor(task_id="td", delta=timedelta(hours=1))
    with pytest.raises(TaskDeferred) as deferred:
        _sensor("dt")(
            sensor={
                "poke_interval": 60.0,
                "timeout": 10.0,
                "mode": "poke",
                "deferrable": True,
                "soft_fail": False,
                "args": {"moment": "2999-01-01T00:00:00+00:00"},
            }
        )
    assert deferred.value.trigger.args() == {"moment": "2999-01-01T00:00:00+00:00"}
    monkeypatch.setenv("RAFTSCHED_DATA_INTERVAL_END", "2000-01-01T00:00:00+00:00")
    sensor = {
        "poke_interval": 60.0,
        "timeout": 10.0,
        "mode": "poke",
        "deferrable": False,
        "soft_fail": False,
        "args": {"delta": 3600.0},
    }
    assert _sensor("td")(sensor=sensor) is None  # long past


def test_a_bad_sensor_is_refused_at_parse() -> None:
    with DAG("s", schedule=None, start_date=START), pytest.raises(DagDefinitionError):
        FileSensor(task_id="x", filepath="/x", poke_interval=0.5)
    with DAG("s", schedule=None, start_date=START), pytest.raises(DagDefinitionError):
        FileSensor(task_id="y", filepath="/x", mode="smart")


def test_task_sensor_pokes_and_reschedules(tmp_path: Path) -> None:
    from raftsched.airflow.decorators import task
    from raftsched.airflow.sensors.base import PokeReturnValue

    target = tmp_path / "ready"

    @task.sensor(poke_interval=1, timeout=60, mode="reschedule")
    def ready(path: str) -> PokeReturnValue:
        return PokeReturnValue(Path(path).exists(), "found")

    with DAG("s", schedule=None, start_date=START):
        ready(str(target))
    run = _sensor("ready")
    with pytest.raises(TaskDeferred) as deferred:
        run(path=str(target))
    carried = deferred.value.kwargs
    assert carried["path"] == str(target) and deferred.value.trigger.kind == "time"
    target.write_text("x")
    assert run(**carried, event="now") == "found"
    with pytest.raises(DagDefinitionError):
        task.sensor(poke_interval=0.1)(lambda: True)
