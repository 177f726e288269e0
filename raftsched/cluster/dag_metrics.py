"""Per-DAG and per-task series of a scheduler node's ``/metrics``, with bounded label sets.

Read at scrape time from the node's replicated state (live runs, and finished ones until
they are evicted), under its read lock, in one pass (O(live state)):

- ``raftsched_dag_runs{dag_id,state}``: runs per DAG and run state
- ``raftsched_dag_task_instances{dag_id,state}``: task instances per DAG and task state
- ``raftsched_dag_last_run_duration_seconds{dag_id}``: the newest finished run's start -> end
- ``raftsched_task_last_duration_seconds{dag_id,task_id}``: the newest finished attempt's
  start -> end, per task

Cardinality: ``dag_id`` takes at most :data:`MAX_DAG_LABELS` values, the DAGs with the most
runs and task instances held (ties by id); the counts of every other DAG are summed under
``dag_id="__other__"`` (a DAG really named so would share that series). ``task_id`` takes
at most :data:`MAX_TASK_LABELS` values per labelled DAG (its first task ids in order; the
others have no duration series). So at most 51 x 4 run series, 51 x 8 task-instance series,
50 duration series and 50 x 30 task duration series: under 2,000 per node. Every node holds
the same replicated state: aggregate with ``max by (dag_id, ...)`` (or take the leader's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

DAG_METRIC_NAMES = (
    "raftsched_dag_runs",
    "raftsched_dag_task_instances",
    "raftsched_dag_last_run_duration_seconds",
    "raftsched_task_last_duration_seconds",
)
MAX_DAG_LABELS = 50
MAX_TASK_LABELS = 30
OTHER = "__other__"
RUN_STATES = ("queued", "running", "success", "failed")
TASK_STATES = (
    "none",
    "queued",
    "running",
    "success",
    "failed",
    "up_for_retry",
    "upstream_failed",
    "skipped",
)


def _value(state: Any) -> str:
    return str(getattr(state, "value", state)).lower()


def scan(state: Any) -> dict[str, Any]:
    """Under the node's read lock: per DAG its run and task-instance counts by state, its
    newest finished run's duration, each task's newest finished attempt's duration."""
    runs: dict[str, dict[str, int]] = {}
    tis: dict[str, dict[str, int]] = {}
    last_run: dict[str, tuple[Any, float]] = {}
    last_task: dict[tuple[str, str], tuple[Any, float]] = {}
    for run in state.runs():
        dag = run.dag_id
        counts = runs.setdefault(dag, {})
        key = _value(run.state)
        counts[key] = counts.get(key, 0) + 1
        if run.start_date is not None and run.end_date is not None:
            seconds = max(0.0, (run.end_date - run.start_date).total_seconds())
            if dag not in last_run or run.end_date > last_run[dag][0]:
                last_run[dag] = (run.end_date, seconds)
        ti_counts = tis.setdefault(dag, {})
        for ti in state.task_instances(dag, run.run_id):
            ti_key = _value(ti.state)
            ti_counts[ti_key] = ti_counts.get(ti_key, 0) + 1
            if ti.start_date is not None and ti.end_date is not None:
                task = (dag, ti.key.task_id)
                seconds = max(0.0, (ti.end_date - ti.start_date).total_seconds())
                if task not in last_task or ti.end_date > last_task[task][0]:
                    last_task[task] = (ti.end_date, seconds)
    return {"runs": runs, "tis": tis, "last_run": last_run, "last_task": last_task}


def labelled(found: dict[str, Any], most: int = MAX_DAG_LABELS) -> set[str]:
    """The DAGs that get their own ``dag_id`` value: the ``most`` with the most items."""
    size = {
        dag: sum(found["runs"].get(dag, {}).values()) + sum(found["tis"].get(dag, {}).values())
        for dag in set(found["runs"]) | set(found["tis"])
    }
    return set(sorted(size, key=lambda d: (-size[d], d))[:most])


class DagCollector(Collector):
    def __init__(
        self,
        node: Callable[[], Any],
        *,
        max_dags: int = MAX_DAG_LABELS,
        max_tasks: int = MAX_TASK_LABELS,
    ) -> None:
        self._node, self._max_dags, self._max_tasks = node, max_dags, max_tasks

    def collect(self) -> Iterator[Metric]:
        node = self._node()
        if node is None:
            return
        found = node.read(scan)
        keep = labelled(found, self._max_dags)
        yield self._counts(
            found["runs"], keep, RUN_STATES, "raftsched_dag_runs", "Runs held, per DAG and state."
        )
        yield self._counts(
            found["tis"],
            keep,
            TASK_STATES,
            "raftsched_dag_task_instances",
            "Task instances held, per DAG and state.",
        )
        last_run = GaugeMetricFamily(
            "raftsched_dag_last_run_duration_seconds",
            "The newest finished run's duration, per DAG.",
            labels=["dag_id"],
        )
        for dag in sorted(keep & set(found["last_run"])):
            last_run.add_metric([dag], found["last_run"][dag][1])
        yield last_run
        last_task = GaugeMetricFamily(
            "raftsched_task_last_duration_seconds",
            "The newest finished attempt's duration, per task.",
            labels=["dag_id", "task_id"],
        )
        per_dag: dict[str, int] = {}
        for dag, task in sorted(found["last_task"]):
            if dag not in keep or per_dag.get(dag, 0) >= self._max_tasks:
                continue
            per_dag[dag] = per_dag.get(dag, 0) + 1
            last_task.add_metric([dag, task], found["last_task"][(dag, task)][1])
        yield last_task

    @staticmethod
    def _counts(
        counts: dict[str, dict[str, int]],
        keep: set[str],
        states: tuple[str, ...],
        name: str,
        text: str,
    ) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, text, labels=["dag_id", "state"])
        other: dict[str, int] = {}
        for dag, by_state in counts.items():
            if dag not in keep:
                for key, value in by_state.items():
                    other[key] = other.get(key, 0) + value
        for dag in sorted(keep):
            by_state = counts.get(dag, {})
            for key in states:
                family.add_metric([dag, key], float(by_state.get(key, 0)))
        if other:
            for key in states:
                family.add_metric([OTHER, key], float(other.get(key, 0)))
        return family
