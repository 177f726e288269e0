"""A layered left-to-right layout of a DAG's tasks, drawn server-side as SVG (no JS library).

Each task's layer is the length of the longest path from a root to it; within a layer tasks
are ordered by the mean position of their upstream tasks (one barycentre pass), then by id.
Edges are cubic curves from the right edge of a task to the left edge of its downstream.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

NODE_W = 170
NODE_H = 30
GAP_X = 70
GAP_Y = 16
PAD = 12


@dataclass
class Layout:
    width: int
    height: int
    nodes: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, Any]] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # task ids, layer by layer


def layers(tasks: list[dict[str, Any]]) -> dict[str, int]:
    """task_id -> layer (longest path from a root), by Kahn's algorithm. Unknown upstream ids
    are ignored; tasks on a cycle (which the parser refuses anyway) land in layer 0."""
    upstream = {t["task_id"]: [u for u in t["upstream"] if u] for t in tasks}
    downstream: dict[str, list[str]] = {task_id: [] for task_id in upstream}
    waiting: dict[str, int] = {}
    for task_id, ups in upstream.items():
        known = [u for u in ups if u in upstream]
        waiting[task_id] = len(known)
        for up in known:
            downstream[up].append(task_id)
    layer = {task_id: 0 for task_id in upstream}
    ready = deque(sorted(t for t, n in waiting.items() if n == 0))
    while ready:
        current = ready.popleft()
        for down in downstream[current]:
            layer[down] = max(layer[down], layer[current] + 1)
            waiting[down] -= 1
            if waiting[down] == 0:
                ready.append(down)
    return layer


def topological(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks in dependency order as the graph reads, left to right: by layer, then by
    task id (every task after all of its upstream tasks)."""
    layer = layers(tasks)
    return sorted(tasks, key=lambda t: (layer.get(t["task_id"], 0), t["task_id"]))


def layout(tasks: list[dict[str, Any]]) -> Layout:
    layer = layers(tasks)
    upstream = {t["task_id"]: t["upstream"] for t in tasks}
    columns: dict[int, list[str]] = {}
    for task_id, index in layer.items():
        columns.setdefault(index, []).append(task_id)
    row: dict[str, float] = {}
    for index in sorted(columns):

        def key(task_id: str) -> tuple[float, str]:
            ups = [row[u] for u in upstream[task_id] if u in row]
            return (sum(ups) / len(ups) if ups else 0.0, task_id)

        columns[index].sort(key=key)
        for position, task_id in enumerate(columns[index]):
            row[task_id] = position
    tallest = max((len(c) for c in columns.values()), default=0)
    result = Layout(
        width=PAD * 2 + max(len(columns), 1) * (NODE_W + GAP_X) - GAP_X,
        height=PAD * 2 + max(tallest, 1) * (NODE_H + GAP_Y) - GAP_Y,
    )
    place: dict[str, tuple[int, int]] = {}
    for index in sorted(columns):
        offset = (tallest - len(columns[index])) * (NODE_H + GAP_Y) // 2
        for position, task_id in enumerate(columns[index]):
            x = PAD + index * (NODE_W + GAP_X)
            y = PAD + offset + position * (NODE_H + GAP_Y)
            place[task_id] = (x, y)
            label = task_id if len(task_id) <= 22 else task_id[:21] + "…"
            result.nodes.append({"task_id": task_id, "x": x, "y": y, "label": label})
            result.order.append(task_id)
    for task_id, ups in upstream.items():
        for up in ups:
            if up not in place or task_id not in place:
                continue
            (x1, y1), (x2, y2) = place[up], place[task_id]
            x1, y1, y2 = x1 + NODE_W, y1 + NODE_H // 2, y2 + NODE_H // 2
            bend = max((x2 - x1) // 2, 20)
            path = f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"
            result.edges.append({"source": up, "target": task_id, "path": path})
    return result
