"""Charts drawn on the server as SVG (``templates/_charts.html`` renders what these compute):
no charting library, no script, nothing fetched but the page.

From data the pages already read, never an extra cluster call:

- :func:`run_durations` and :func:`schedule_delays`: one bar per run of the DAG page's grid
  (start -> end; a scheduled run's start after its data interval's end), oldest left;
- :func:`task_durations`: one row of bars per task across the same runs (the grid's cells);
- :func:`gantt`: one run's task instances on a time axis, queued -> running -> done.

Every function answers plain numbers (pixels) and strings; seconds are rounded for titles.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

WIDTH = 720  # the plot area of a bar chart, px
HEIGHT = 120
ROW = 18  # a Gantt row or a task row, px
LABEL = 170  # room for task ids on the left, px


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 10:  # a quick task: tenths tell its bars apart
        return f"{max(0.0, seconds):.1f}s"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _span(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())


def _bars(
    values: list[tuple[float | None, dict[str, Any]]], *, width: int = WIDTH, height: int = HEIGHT
) -> dict[str, Any]:
    """Bars of ``values`` (seconds or None: no bar) side by side; each bar keeps its extras
    (``state``, ``title``, ``run_id``). The y axis: 0 to the largest value."""
    top = max((v for v, _ in values if v is not None), default=0.0) or 1.0
    step = width / max(len(values), 1)
    bars = []
    for i, (value, extra) in enumerate(values):
        h = 0.0 if value is None else max(1.0, value / top * height)
        bars.append(
            {
                **extra,
                "x": round(i * step + step * 0.15, 1),
                "y": round(height - h, 1),
                "w": round(step * 0.7, 1),
                "h": round(h, 1),
                "seconds": value,
                "text": seconds_text(value),
            }
        )
    return {
        "width": width,
        "height": height,
        "bars": bars,
        "max_text": seconds_text(top if any(v is not None for v, _ in values) else None),
        "empty": all(v is None for v, _ in values),
    }


def run_durations(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each run's duration (start -> end; a run not ended has no bar), oldest left."""
    return _bars(
        [
            (
                _span(run.get("start_date"), run.get("end_date")),
                {
                    "state": run.get("state") or "none",
                    "run_id": run["run_id"],
                    "label": run.get("label", ""),
                },
            )
            for run in runs
        ]
    )


def schedule_delays(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """How late each scheduled run started: its start minus its data interval's end (when
    the schedule meant it to start). Manual and backfill runs have no bar."""
    values = []
    for run in runs:
        delay = None
        if run.get("run_type") == "scheduled":
            delay = _span(run.get("data_interval_end"), run.get("start_date"))
        values.append(
            (
                delay,
                {"state": "queued", "run_id": run["run_id"], "label": run.get("label", "")},
            )
        )
    return _bars(values)


def task_durations(grid: dict[str, Any]) -> dict[str, Any]:
    """One row per task of the grid, one bar per run: the attempt's duration (the grid's
    ``durations``), on one scale
    for every task (so a slow task stands out)."""
    runs = grid["runs"]
    rows = []
    durations = grid["durations"]
    top = max((s for row in durations.values() for s in row if s), default=0.0)
    top = top or 1.0
    step = WIDTH / max(len(runs), 1)
    for index, task_id in enumerate(grid["tasks"]):
        bars = []
        for i, seconds in enumerate(durations[task_id]):
            cell = grid["cells"][task_id][i]
            if seconds is None or cell is None:
                continue
            h = max(1.0, seconds / top * (ROW - 4))
            bars.append(
                {
                    "x": round(LABEL + i * step + step * 0.15, 1),
                    "y": round(index * ROW + ROW - 2 - h, 1),
                    "w": round(step * 0.7, 1),
                    "h": round(h, 1),
                    "state": cell["state"],
                    "run_id": runs[i]["run_id"],
                    "text": seconds_text(seconds),
                }
            )
        rows.append({"task_id": task_id, "y": index * ROW, "bars": bars})
    return {
        "width": LABEL + WIDTH,
        "height": max(len(rows), 1) * ROW,
        "rows": rows,
        "max_text": seconds_text(top),
        "empty": not any(row["bars"] for row in rows),
    }


def gantt(task_instances: list[dict[str, Any]], *, now: datetime | None = None) -> dict[str, Any]:
    """One run's task instances on one time axis: a grey bar while queued (queued_at ->
    start), a bar in the state's colour while running and after (start -> end, or now while
    it runs). Tasks in the order given; those never queued have an empty row."""
    now = now or datetime.now(UTC)
    times = [
        t
        for ti in task_instances
        for t in (ti.get("queued_at"), ti.get("start_date"), ti.get("end_date"))
        if t is not None
    ]
    rows: list[dict[str, Any]] = []
    if not times:
        return {"width": LABEL + WIDTH, "height": ROW, "rows": rows, "empty": True, "ticks": []}
    origin = min(times)
    running = any(ti.get("start_date") and not ti.get("end_date") for ti in task_instances)
    last = max([*times, now] if running else times)
    total = max((last - origin).total_seconds(), 1.0)

    def x(moment: datetime) -> float:
        return round(LABEL + (moment - origin).total_seconds() / total * WIDTH, 1)

    for index, ti in enumerate(task_instances):
        row: dict[str, Any] = {"task_id": ti["task_id"], "y": index * ROW, "segments": []}
        queued, start, end = ti.get("queued_at"), ti.get("start_date"), ti.get("end_date")
        if queued is not None and start is not None and start > queued:
            row["segments"].append(
                {
                    "x": x(queued),
                    "w": max(1.0, round(x(start) - x(queued), 1)),
                    "state": "queued",
                    "text": f"queued {seconds_text(_span(queued, start))}",
                }
            )
        elif queued is not None and start is None:
            row["segments"].append(
                {
                    "x": x(queued),
                    "w": max(1.0, round(x(last) - x(queued), 1)),
                    "state": "queued",
                    "text": f"queued {seconds_text(_span(queued, last))}",
                }
            )
        if start is not None:
            stop = end or last
            row["segments"].append(
                {
                    "x": x(start),
                    "w": max(1.0, round(x(stop) - x(start), 1)),
                    "state": ti.get("state") or "none",
                    "text": f"{ti.get('state') or 'none'} {seconds_text(_span(start, stop))}",
                }
            )
        rows.append(row)
    ticks = [
        {"x": round(LABEL + WIDTH * f, 1), "text": "+" + seconds_text(total * f)}
        for f in (0.0, 0.25, 0.5, 0.75, 1.0)
    ]
    return {
        "width": LABEL + WIDTH + 40,
        "height": len(rows) * ROW,
        "rows": rows,
        "empty": False,
        "ticks": ticks,
        "origin": origin,
        "total_text": seconds_text(total),
    }


SPARK_W, SPARK_H = 320, 60


def sparkline(samples: list[dict[str, Any]], key: str, *, unit: str = "") -> dict[str, Any]:
    """One node's ``key`` over its samples as a polyline (a gap where a sample has None):
    {"width", "height", "lines": ["x,y x,y ...", ...], "max_text", "last_text", "empty"}."""
    points = [(s["at"], s[key]) for s in samples if s.get("at") is not None]
    values = [v for _, v in points if v is not None]
    if len(points) < 2 or not values:
        return {"width": SPARK_W, "height": SPARK_H, "lines": [], "empty": True}
    start, end = points[0][0], points[-1][0]
    span = max((end - start).total_seconds(), 1.0)
    top = max(values) or 1.0
    lines, current = [], []
    for at, value in points:
        if value is None:
            if current:
                lines.append(" ".join(current))
            current = []
            continue
        x = (at - start).total_seconds() / span * SPARK_W
        y = SPARK_H - 2 - value / top * (SPARK_H - 4)
        current.append(f"{x:.1f},{y:.1f}")
    if current:
        lines.append(" ".join(current))

    def fmt(v: float) -> str:
        return seconds_text(v) if unit == "s" else f"{v:g}"

    last = next((v for _, v in reversed(points) if v is not None), None)
    return {
        "width": SPARK_W,
        "height": SPARK_H,
        "lines": lines,
        "max_text": fmt(top),
        "last_text": fmt(last) if last is not None else "—",
        "since": start,
        "empty": False,
    }


DRAW_ORDER = {"start": 0, "role": 1, "member_added": 2, "member_removed": 2, "election": 3}
DRAW_ORDER["leader_change"] = 4


def timeline(nodes: list[dict[str, Any]], *, now: datetime | None = None) -> dict[str, Any]:
    """Every node's events on one time axis, a row per node: {"rows": [{"node_id", "y",
    "marks": [{"x", "kind", "text"}]}], "width", "height", "since", "empty"}."""
    now = now or datetime.now(UTC)
    times = [e["at"] for n in nodes for e in n["events"] if e["at"] is not None]
    if not times:
        return {"rows": [], "width": LABEL + WIDTH, "height": ROW, "empty": True}
    start = min(times)
    span = max((now - start).total_seconds(), 1.0)
    rows = []
    for index, node in enumerate(nodes):
        marks = [
            {
                "x": round(LABEL + (e["at"] - start).total_seconds() / span * WIDTH, 1),
                "kind": e["kind"],
                "text": f"{e['kind'].replace('_', ' ')}: {e['detail']} (term {e['term']})",
            }
            for e in node["events"]
            if e["at"] is not None
        ]
        marks.sort(key=lambda m: DRAW_ORDER.get(m["kind"], 0))  # leader changes on top
        rows.append({"node_id": node["node_id"], "y": index * ROW, "marks": marks})
    return {
        "rows": rows,
        "width": LABEL + WIDTH + 10,
        "height": len(rows) * ROW,
        "since": start,
        "span_text": seconds_text(span),
        "empty": False,
    }
