"""Per-DAG and per-task series (raftsched/cluster/dag_metrics.py): bounded label sets (the
DAGs with the most items by name, the rest summed as __other__; a cap on tasks per DAG), and
names by the Prometheus conventions (the rules of tests/deploy/test_metric_names.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from raftsched.cluster.dag_metrics import OTHER, DagCollector
from raftsched.core.model import RunState, TaskState

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from test_metric_names import problems

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class _Key:
    task_id: str


@dataclass
class _Ti:
    key: _Key
    state: TaskState
    start_date: datetime | None = None
    end_date: datetime | None = None


@dataclass
class _Run:
    dag_id: str
    run_id: str
    state: RunState
    start_date: datetime | None = None
    end_date: datetime | None = None
    tis: list[_Ti] = field(default_factory=list)


class _State:
    def __init__(self, runs: list[_Run]) -> None:
        self._runs = runs

    def runs(self) -> list[_Run]:
        return self._runs

    def task_instances(self, dag_id: str, run_id: str) -> list[_Ti]:
        return next(r.tis for r in self._runs if (r.dag_id, r.run_id) == (dag_id, run_id))


class _Node:
    def __init__(self, state: _State) -> None:
        self.state = state

    def read(self, fn: Any) -> Any:
        return fn(self.state)


def _scrape(runs: list[_Run], **caps: int) -> str:
    registry = CollectorRegistry()
    registry.register(DagCollector(lambda: _Node(_State(runs)), **caps))
    return generate_latest(registry).decode()


def _done(dag: str, n: int, seconds: float, *tasks: tuple[str, float]) -> _Run:
    end = T0 + timedelta(hours=n)
    tis = [_Ti(_Key(t), TaskState.SUCCESS, end - timedelta(seconds=s), end) for t, s in tasks]
    return _Run(dag, f"r{n}", RunState.SUCCESS, end - timedelta(seconds=seconds), end, tis)


def test_counts_and_newest_durations_per_dag_and_task() -> None:
    runs = [
        _done("etl", 1, 30, ("extract", 10)),
        _done("etl", 2, 50, ("extract", 20), ("load", 5)),
        _Run("etl", "r3", RunState.RUNNING, T0, None, [_Ti(_Key("extract"), TaskState.RUNNING)]),
    ]
    text = _scrape(runs)
    assert 'raftsched_dag_runs{dag_id="etl",state="success"} 2.0' in text
    assert 'raftsched_dag_runs{dag_id="etl",state="running"} 1.0' in text
    assert 'raftsched_dag_task_instances{dag_id="etl",state="success"} 3.0' in text
    assert 'raftsched_dag_last_run_duration_seconds{dag_id="etl"} 50.0' in text
    assert 'raftsched_task_last_duration_seconds{dag_id="etl",task_id="extract"} 20.0' in text
    assert OTHER not in text
    assert problems(text) == []


def test_label_values_are_bounded() -> None:
    runs = [_done("big", i, 1, ("t", 1)) for i in range(3)]
    runs += [_done("mid", i, 1, ("t", 1)) for i in range(2)]
    runs += [_done(f"small{i}", 0, 1, ("t", 1)) for i in range(5)]
    runs += [_done("wide", 9, 1, *((f"task{i}", 1) for i in range(4)))]
    text = _scrape(runs, max_dags=3, max_tasks=2)
    dags = {
        line.split('dag_id="')[1].split('"')[0] for line in text.splitlines() if "dag_id=" in line
    }
    assert dags == {"big", "wide", "mid", OTHER}  # wide: 1 run + 4 task instances
    assert f'raftsched_dag_runs{{dag_id="{OTHER}",state="success"}} 5.0' in text
    wide_tasks = [line for line in text.splitlines() if "task_id=" in line and '"wide"' in line]
    assert len(wide_tasks) == 2
    assert "small" not in text
