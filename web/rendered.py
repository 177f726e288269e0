"""The "Rendered" section of a task page: the task's command, env values or kwargs as its
attempt runs them, rendered by the worker's own function (raftsched.dags.templating) from the
run's committed conf and dates and the DAG's params."""

from __future__ import annotations

import json
from typing import Any

from raftsched.core.model import TaskSpec
from raftsched.dags.templating import render_for_display


def rendered_fields(
    dag: dict[str, Any], run: dict[str, Any], task_id: str, try_number: int
) -> dict[str, Any] | None:
    """``{"command"|"kwargs", "env"}`` or ``{"error": text}``; None when the DAG no longer
    has the task. ``dag`` is ``Gateway.get_dag``'s answer, ``run`` a ``run_dict``."""
    task = next((t for t in dag.get("tasks", ()) if t["task_id"] == task_id), None)
    if task is None:
        return None
    spec = TaskSpec(
        task_id=task_id,
        kind=task["kind"],
        command=task["command"],
        env=tuple((str(k), str(v)) for k, v in task.get("env", ())),
        kwargs_json=task.get("kwargs_json") or "{}",
    )
    try:
        conf = json.loads(run.get("conf_json") or "{}")
    except ValueError:
        conf = {}
    return render_for_display(
        spec,
        dag_id=dag["dag_id"],
        run_id=run["run_id"],
        try_number=try_number,
        logical_date=run.get("logical_date"),
        data_interval_start=run.get("data_interval_start"),
        data_interval_end=run.get("data_interval_end"),
        conf=conf if isinstance(conf, dict) else {},
        params_json=dag.get("params_json") or "",
        asset_events_json=run.get("asset_events_json") or "",
    )
