"""The grid of a DAG page: its recent runs (oldest left) x its tasks, each cell a state."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from raftsched.web.gateway import Gateway, NotFound


def build(gw: Gateway, dag_id: str, task_order: list[str], runs_limit: int) -> dict[str, Any]:
    """{"runs": [run, ...], "tasks": [task_id, ...], "cells": {task_id: [cell|None, ...]},
    "latest": {task_id: state}} where a cell is {"state", "try_number"}."""
    runs = list(reversed(gw.list_runs(dag_id, page_size=runs_limit)["runs"]))

    def instances(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
        try:
            found = gw.task_instances(dag_id, run["run_id"])["task_instances"]
        except NotFound:  # evicted or gone between the two calls: show it without cells
            return {}
        return {ti["task_id"]: ti for ti in found}

    if runs:
        with ThreadPoolExecutor(max_workers=min(8, len(runs))) as pool:
            per_run = list(pool.map(instances, runs))
    else:
        per_run = []
    tasks = list(task_order)
    for found in per_run:  # tasks of older definitions still show
        tasks += sorted(t for t in found if t not in tasks)
    cells = {task_id: [_cell(found.get(task_id)) for found in per_run] for task_id in tasks}
    latest = {
        task_id: (row[-1] or {}).get("state", "") if row else "" for task_id, row in cells.items()
    }
    return {"runs": runs, "tasks": tasks, "cells": cells, "latest": latest}


def _cell(ti: dict[str, Any] | None) -> dict[str, Any] | None:
    if ti is None:
        return None
    return {"state": ti["state"] or "none", "try_number": ti["try_number"]}
