"""Rendering for CLI results: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        "-o",
        choices=("table", "json"),
        default="table",
        help="table for people (default), json for scripts",
    )


def render_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max([len(col), *(len(r[i]) for r in cells)]) for i, col in enumerate(columns)]
    lines = ["  ".join(col.upper().ljust(w) for col, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def emit(
    payload: Any,
    *,
    output: str,
    rows: Sequence[Mapping[str, Any]] | None = None,
    columns: Sequence[str] = (),
    stream: TextIO | None = None,
) -> None:
    """Print ``payload`` as JSON, or ``rows`` (default: payload) as a table of ``columns``."""
    out = stream or sys.stdout
    if output == "json":
        json.dump(payload, out, indent=2, sort_keys=True, default=str)
        out.write("\n")
        return
    table_rows = payload if rows is None else rows
    out.write(render_table(table_rows, columns) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value)
    return str(value)
