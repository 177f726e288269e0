"""Airflow's sensors over deferral (docs/architecture.md §17): ``FileSensor``,
``DateTimeSensor``/``DateTimeSensorAsync``, ``TimeDeltaSensor``/``TimeDeltaSensorAsync``.

A sensor is a Python task whose callable pokes once. ``deferrable=True`` (and the ``Async``
sensors): when the poke says "not yet", the attempt defers on the matching trigger (a file
trigger, a time trigger) and its slot is free until the triggerer sees it fire.
``mode="reschedule"``: it defers on a time trigger ``poke_interval`` seconds on and pokes
again then, so it too holds no slot between pokes (the reschedule time is a committed
trigger). ``mode="poke"``: it pokes in its attempt every ``poke_interval`` seconds, holding
its slot. ``timeout`` (seconds, default 7 days) fails the task in every mode: a deferred
wait through the trigger's timeout, a rescheduled one by the deadline it carries.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from raftsched.airflow._operators import current_dag, task_options
from raftsched.airflow.exceptions import AirflowSensorTimeout, AirflowSkipException
from raftsched.dags import task_groups, taskflow
from raftsched.dags.deferral import (
    MIN_POKE_INTERVAL,
    BaseTrigger,
    DateTimeTrigger,
    FileTrigger,
    TaskDeferred,
)
from raftsched.dags.taskflow import TaskFlowTask
from raftsched.errors import DagDefinitionError

DEFAULT_TIMEOUT = 7 * 86_400.0
MODES = ("poke", "reschedule")
SENSOR_OPTIONS = ("poke_interval", "timeout", "mode", "soft_fail")
_DEADLINE = "__sensor_deadline__"  # a rescheduled @task.sensor's deadline, in its kwargs


@dataclass
class PokeReturnValue:
    """What a ``@task.sensor`` function may return: done, and the value to keep (XCom)."""

    is_done: bool
    xcom_value: Any = None


def sensor_config(options: dict[str, Any], where: str) -> dict[str, Any]:
    """``@task.sensor``'s options, taken out of ``options`` (and checked)."""
    config = {
        "poke_interval": _seconds(options.pop("poke_interval", 60.0)),
        "timeout": _seconds(options.pop("timeout", DEFAULT_TIMEOUT)),
        "mode": options.pop("mode", "poke"),
        "soft_fail": bool(options.pop("soft_fail", False)),
    }
    if config["mode"] not in MODES or config["poke_interval"] < MIN_POKE_INTERVAL:
        raise DagDefinitionError(
            f"{where}: mode must be one of {MODES} and poke_interval at least"
            f" {MIN_POKE_INTERVAL:g} s (got {config['mode']!r}, {config['poke_interval']:g})"
        )
    return config


def resumed(kwargs: dict[str, Any]) -> str:
    """A rescheduled sensor's deadline ("" on its first attempt); its trigger's event goes."""
    kwargs.pop("event", None)
    return str(kwargs.pop(_DEADLINE, "") or "")


def poke_loop(
    sensor: dict[str, Any], poke: Any, callable_name: str, kwargs: dict[str, Any], deadline: str
) -> Any:
    """Call ``poke`` until it says done (a truthy value, or a PokeReturnValue); its value
    (a PokeReturnValue's xcom_value) is the task's. Past ``timeout``: fails (soft_fail:
    skipped). ``mode="reschedule"``: between pokes the attempt defers on a time trigger,
    carrying ``kwargs`` and the deadline to the next attempt."""
    due = datetime.fromisoformat(deadline) if deadline else _after(sensor["timeout"])
    interval = float(sensor["poke_interval"])
    while True:
        value = poke()
        if isinstance(value, PokeReturnValue):
            if value.is_done:
                return value.xcom_value
        elif value:
            return None
        if datetime.now(UTC) >= due:
            if sensor["soft_fail"]:
                raise AirflowSkipException(f"not done after {sensor['timeout']:g} s")
            raise AirflowSensorTimeout(f"not done after {sensor['timeout']:g} s")
        if sensor["mode"] == "reschedule":
            moment = min(due, datetime.now(UTC) + timedelta(seconds=interval))
            carried = {**kwargs, _DEADLINE: due.isoformat()}
            raise TaskDeferred(DateTimeTrigger(moment), callable_name, carried)
        time.sleep(interval)


class BaseSensorOperator(TaskFlowTask):
    """What every sensor takes: ``poke_interval``, ``timeout``, ``mode``, ``deferrable``."""

    always_deferrable = False  # the Async sensors

    def __init__(
        self,
        *,
        task_id: str,
        poke_interval: float | timedelta = 60.0,
        timeout: float | timedelta = DEFAULT_TIMEOUT,
        mode: str = "poke",
        deferrable: bool = False,
        soft_fail: bool = False,
        dag: Any = None,
        **kwargs: Any,
    ) -> None:
        owner = current_dag(dag)
        full_id = task_groups.qualify(task_id)
        interval = _seconds(poke_interval)
        if mode not in MODES or interval < MIN_POKE_INTERVAL:
            raise DagDefinitionError(
                f"sensor {full_id!r}: mode must be one of {MODES} and poke_interval at least"
                f" {MIN_POKE_INTERVAL:g} s (got {mode!r}, {interval:g})",
                dag_id=owner.dag_id,
                task_id=full_id,
            )
        options = task_options(owner, full_id, kwargs)
        config = {
            "poke_interval": interval,
            "timeout": _seconds(timeout),
            "mode": mode,
            "deferrable": bool(deferrable or self.always_deferrable),
            "soft_fail": bool(soft_fail),
            "args": self.poke_args(),
        }
        super().__init__(task_id, dag=owner, kwargs={"sensor": config}, **options)
        # the worker calls _run through the registry (callable_name @taskflow:DAG:TASK)
        taskflow.register(owner.dag_id, self.task_id, self._run)  # type: ignore[arg-type]

    # -- what a sensor says (run on the worker) ---------------------------------------------

    def poke_args(self) -> dict[str, Any]:
        return {}

    def poke(self, args: dict[str, Any]) -> bool:
        raise NotImplementedError

    def trigger(self, args: dict[str, Any], interval: float) -> BaseTrigger:
        raise NotImplementedError

    # -- the attempt ------------------------------------------------------------------------

    def _run(self, sensor: dict[str, Any], event: Any = None, deadline: str = "") -> Any:
        if event is not None and not deadline:
            return event  # the trigger fired: what it waited for is there
        args, interval = sensor["args"], float(sensor["poke_interval"])
        due = datetime.fromisoformat(deadline) if deadline else _after(sensor["timeout"])
        while True:
            if self.poke(args):
                return None
            if datetime.now(UTC) >= due:
                if sensor["soft_fail"]:
                    raise AirflowSkipException(f"not there after {sensor['timeout']:g} s")
                raise AirflowSensorTimeout(f"not there after {sensor['timeout']:g} s")
            if sensor["deferrable"]:
                left = (due - datetime.now(UTC)).total_seconds()
                raise TaskDeferred(
                    self.trigger(args, interval), self.callable_name, {"sensor": sensor}, left
                )
            if sensor["mode"] == "reschedule":  # its slot is free until the next poke
                moment = min(due, datetime.now(UTC) + timedelta(seconds=interval))
                kwargs = {"sensor": sensor, "deadline": due.isoformat()}
                raise TaskDeferred(DateTimeTrigger(moment), self.callable_name, kwargs)
            time.sleep(interval)


class FileSensor(BaseSensorOperator):
    """Waits for a file (or a glob pattern's first match) on the worker/triggerer host."""

    def __init__(self, *, filepath: str, fs_conn_id: str | None = None, **kwargs: Any) -> None:
        del fs_conn_id  # a local path: the triggerer's and the workers' hosts see the same
        self.filepath = os.fspath(filepath)
        super().__init__(**kwargs)

    def poke_args(self) -> dict[str, Any]:
        return {"filepath": self.filepath}

    def poke(self, args: dict[str, Any]) -> bool:
        return bool(glob.glob(args["filepath"]))

    def trigger(self, args: dict[str, Any], interval: float) -> BaseTrigger:
        return FileTrigger(args["filepath"], poke_interval=interval)


class DateTimeSensor(BaseSensorOperator):
    """Waits until ``target_time`` (an aware datetime, or its ISO text)."""

    def __init__(self, *, target_time: datetime | str, **kwargs: Any) -> None:
        moment = (
            datetime.fromisoformat(target_time) if isinstance(target_time, str) else target_time
        )
        if moment.tzinfo is None:
            raise DagDefinitionError(f"target_time {target_time!r} needs a time zone")
        self.target = moment.astimezone(UTC).isoformat()
        super().__init__(**kwargs)

    def poke_args(self) -> dict[str, Any]:
        return {"moment": self.target}

    def poke(self, args: dict[str, Any]) -> bool:
        return datetime.now(UTC) >= datetime.fromisoformat(args["moment"])

    def trigger(self, args: dict[str, Any], interval: float) -> BaseTrigger:
        return DateTimeTrigger(datetime.fromisoformat(args["moment"]))


class DateTimeSensorAsync(DateTimeSensor):
    always_deferrable = True


class TimeDeltaSensor(BaseSensorOperator):
    """Waits until the run's data interval end plus ``delta`` (Airflow's meaning)."""

    def __init__(self, *, delta: timedelta, **kwargs: Any) -> None:
        self.delta = delta.total_seconds()
        super().__init__(**kwargs)

    def poke_args(self) -> dict[str, Any]:
        return {"delta": self.delta}

    def _moment(self, args: dict[str, Any]) -> datetime:
        end = os.environ.get("RAFTSCHED_DATA_INTERVAL_END") or datetime.now(UTC).isoformat()
        return datetime.fromisoformat(end) + timedelta(seconds=float(args["delta"]))

    def poke(self, args: dict[str, Any]) -> bool:
        return datetime.now(UTC) >= self._moment(args)

    def trigger(self, args: dict[str, Any], interval: float) -> BaseTrigger:
        return DateTimeTrigger(self._moment(args))


class TimeDeltaSensorAsync(TimeDeltaSensor):
    always_deferrable = True


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _after(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=float(seconds))
