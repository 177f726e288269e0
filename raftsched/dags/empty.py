"""``EmptyTask``: a task that runs nothing, for joins, fan-outs and markers in a graph.

The scheduler finishes it itself: the apply that finds its trigger rule met marks it SUCCESS
(or SKIPPED / UPSTREAM_FAILED, as any task) and settles what depends on it in the same apply,
so it never takes a worker, a worker slot, a lease, a pool slot or a process
(``core/transitions.py``, docs/architecture.md §19). Airflow's ``EmptyOperator`` and
``DummyOperator`` are this task (``raftsched.airflow``). A DAG with one is refused by a
cluster that is not yet fully on 0.3.0 (the upgrade gate: it is an import error until then).
"""

from __future__ import annotations

from raftsched.dags.tasks import Task


class EmptyTask(Task):
    """``EmptyTask("join", trigger_rule="all_done")``: takes the options every task takes
    (``trigger_rule``, ``priority_weight``, callbacks, ...); its success callbacks run on a
    worker, as any task's."""

    kind = "empty"
    mappable = ()  # nothing to map over


__all__ = ["EmptyTask"]
