#!/usr/bin/env python
"""What rendering a task's templates costs: a typical bash task (command and two env values
with ``{{ ds }}``, ``{{ params.x }}``, a filter) rendered with ``render_task`` as the worker,
the task page and ``tasks render`` do. Three ways:

- ``compile+render``: in the calling process, compiling each template every time (what a
  render cost before templates were cached and sent to the helper);
- ``in process``: in the calling process, templates compiled once (render_fields);
- ``helper``: ``render_task`` itself, in the process's render helper with its memory limit
  (raftsched/dags/render_limits.py): the round trip through a pipe and two pickles.

``--heavy`` imports Flask and gRPC first, as in a webserver. Prints the median and p99 of
each, and the helper's start-up once; asserts nothing.

    .venv/bin/python scripts/bench/render.py
    .venv/bin/python scripts/bench/render.py --heavy --count 500
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from raftsched.dags import templating
from raftsched.dags.templating import render_fields, render_task, template_context

COMMAND = "dump --day {{ ds }} --region {{ params.region | upper }} --run {{ run_id }}"
ENV = (("DAY", "{{ ds_nodash }}"), ("WHO", "{{ conf.get('who', 'nobody') }}"))


def _timings(render: Callable[[], object], count: int) -> list[float]:
    out = []
    for _ in range(count):
        started = time.perf_counter()
        render()
        out.append(time.perf_counter() - started)
    return sorted(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--heavy", action="store_true", help="import Flask and gRPC first")
    args = parser.parse_args()
    if args.heavy:
        import flask  # noqa: F401
        import grpc  # noqa: F401
        import raftsched.web  # noqa: F401
    logical = datetime(2024, 3, 5, tzinfo=UTC)
    context = template_context(
        dag_id="d",
        run_id="scheduled__2024-03-05",
        task_id="t",
        try_number=1,
        logical_date=logical,
        data_interval_start=logical,
        data_interval_end=logical,
        conf={"who": "ann"},
        params_json='{"region": {"default": "eu"}}',
    )
    fields = {"command": COMMAND, "env": ENV, "kwargs": {}, "context": context}

    def uncached() -> object:
        templating._compiled.cache_clear()
        return render_fields(**fields)  # type: ignore[arg-type]

    started = time.perf_counter()
    render_task(**fields)  # type: ignore[arg-type]
    first = time.perf_counter() - started
    results = {
        "compile+render": _timings(uncached, args.count),
        "in process": _timings(lambda: render_fields(**fields), args.count),  # type: ignore[arg-type]
        "helper": _timings(lambda: render_task(**fields), args.count),  # type: ignore[arg-type]
    }
    print(f"render_task of a 3-field bash task, {args.count} times, heavy={args.heavy}")
    print(f"  the helper's start and first render: {first * 1e3:.1f} ms")
    for name, times in results.items():
        p99 = times[int(len(times) * 0.99) - 1]
        median = statistics.median(times) * 1e3
        print(f"  {name:15} median {median:7.3f} ms  p99 {p99 * 1e3:7.3f} ms")


if __name__ == "__main__":
    main()
