"""The grid of a DAG page: its recent runs (oldest left) x its tasks, each cell a state; the
DAG's skipped-slot ranges (the newest the cluster keeps) are columns of their own between the
runs, marked with their reason."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from typing import Any

from raftsched.web.gateway import Gateway, NotFound

from raftsched.core.mapping import split_id
from raftsched.core.skip_causes import describe


def build(
    gw: Gateway,
    dag_id: str,
    task_order: list[str],
    runs_limit: int,
    skipped: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """{"runs": [run, ...], "tasks": [task_id, ...], "cells": {task_id: [cell|None, ...]},
    "latest": {task_id: state}, "durations": {task_id: [seconds|None, ...]}, "columns":
    [column, ...]} where a cell is {"state", "try_number"}, each run has its column header's
    ``label``, and ``columns`` is the grid's columns oldest left: {"run": index into runs} or
    {"skipped": range} for each of ``skipped`` (the DAG's ``skipped`` ranges) within the
    runs shown (see :func:`columns`)."""
    runs = list(reversed(gw.list_runs(dag_id, page_size=runs_limit)["runs"]))
    for run in runs:
        run["label"] = run_label(run)

    def instances(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
        try:
            found = gw.task_instances(dag_id, run["run_id"])
        except NotFound:  # evicted or gone between the two calls: show it without cells
            return {}
        # The run as read with its cells (one read): the list above may be older, and every
        # cell green beside a run still "running" would be a state that never was
        run.update(state=found["run"]["state"], end_date=found["run"]["end_date"])
        return fold_mapped({ti["task_id"]: ti for ti in found["task_instances"]})

    if runs:
        with ThreadPoolExecutor(max_workers=min(8, len(runs))) as pool:
            per_run = list(pool.map(instances, runs))
    else:
        per_run = []
    tasks = list(task_order)
    for found in per_run:  # tasks of older definitions still show
        tasks += sorted(t for t in found if t not in tasks)
    cells = {task_id: [_cell(found.get(task_id)) for found in per_run] for task_id in tasks}
    # Each attempt's duration once it ended (None: not ended): the DAG page's task chart.
    durations = {task_id: [_seconds(found.get(task_id)) for found in per_run] for task_id in tasks}
    latest = {
        task_id: (row[-1] or {}).get("state", "") if row else "" for task_id, row in cells.items()
    }
    return {
        "runs": runs,
        "tasks": tasks,
        "cells": cells,
        "latest": latest,
        "durations": durations,
        "columns": columns(runs, skipped or [], full=len(runs) >= runs_limit),
    }


def columns(
    runs: list[dict[str, Any]], skipped: list[dict[str, Any]], *, full: bool
) -> list[dict[str, Any]]:
    """The grid's columns, oldest left: each run, and each skipped range placed by its last
    slot before the first run after it. When the grid shows only the newest runs (``full``),
    ranges older than its oldest run are left out, as the runs before it are."""
    ranges = sorted((s for s in skipped if s.get("last") is not None), key=lambda s: s["last"])
    oldest = runs[0].get("logical_date") if runs and full else None
    ranges = [s for s in ranges if oldest is None or s["last"] >= oldest]
    out: list[dict[str, Any]] = []
    for index, run in enumerate(runs):
        when = run.get("logical_date")
        while ranges and when is not None and ranges[0]["last"] < when:
            out.append({"skipped": _skipped_column(ranges.pop(0))})
        out.append({"run": index})
    out.extend({"skipped": _skipped_column(s)} for s in ranges)
    return out


def _skipped_column(s: dict[str, Any]) -> dict[str, Any]:
    first, last = s.get("first") or s["last"], s["last"]
    reason = str(s.get("reason", ""))
    title = "skipped (" + describe(reason.replace("_", " "), int(s.get("count") or 0), first, last)
    return {
        "first": first,
        "last": last,
        "count": s.get("count") or 0,
        "reason": reason,
        "label": run_label({"logical_date": last}),
        "title": title + ")",
    }


def _cell(ti: dict[str, Any] | None) -> dict[str, Any] | None:
    if ti is None:
        return None
    cell = {"state": ti["state"] or "none", "try_number": ti["try_number"]}
    if ti.get("mapped"):
        cell["mapped"] = ti["mapped"]
    return cell


def fold_mapped(tis: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The instances of a mapped task (``task[i]``) folded into its one cell: a row per
    index would be 1,000 rows. The cell says how many are in which state, and shows
    "running" while its instances run (the task itself stays "none" until they are done)."""
    counts: dict[str, dict[str, int]] = {}
    out = {}
    for task_id, ti in tis.items():
        base, index = split_id(task_id)
        if index >= 0 and base in tis:
            state = ti["state"] or "none"
            counts.setdefault(base, {})[state] = counts.setdefault(base, {}).get(state, 0) + 1
        else:
            out[task_id] = ti
    for base, by_state in counts.items():
        parts = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in sorted(by_state.items()))
        ti = out[base] = dict(out[base])
        ti["mapped"] = f"{sum(by_state.values())} mapped instances: {parts}"
        if ti["state"] in ("", "none"):
            ti["state"] = "running"
    return out


def _seconds(ti: dict[str, Any] | None) -> float | None:
    if ti is None or ti.get("start_date") is None or ti.get("end_date") is None:
        return None
    return max(0.0, (ti["end_date"] - ti["start_date"]).total_seconds())


def run_label(run: dict[str, Any]) -> str:
    """A run column's short header: its logical date as ``MM-DD HH:MM:SS`` (UTC), else the
    start of its run id."""
    if run.get("logical_date") is not None:
        return run["logical_date"].astimezone(UTC).strftime("%m-%d %H:%M:%S")
    run_id = run["run_id"]
    return run_id if len(run_id) <= 14 else run_id[:13] + "…"
