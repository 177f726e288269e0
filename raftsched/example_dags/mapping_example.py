"""Dynamic task mapping: one task instance per item of a list known only when the run runs.

``list_files`` returns 1,000 items (its XCom); ``process`` is a bash task mapped over them
with ``.expand()``: the cluster makes 1,000 task instances ``process[0]`` ..
``process[999]`` in the commit of ``list_files``'s outcome, each with its own tries and log
and its item in its environment. ``measure`` maps a Python task over a literal list, and
``summarize`` gets its instances' return values as one list, in order.
Manual runs only: ``raftsched dags trigger example_mapping --conf '{"files": 50}'``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from raftsched import BashTask, dag, task


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    max_active_tasks=32,
    tags=["example", "mapping"],
    description="Dynamic task mapping: .expand() over an upstream's list and a literal list",
)
def example_mapping():
    @task
    def list_files() -> list:
        count = int(json.loads(os.environ.get("RAFTSCHED_CONF") or "{}").get("files", 1000))
        return [{"FILE": f"part-{i:04d}.csv"} for i in range(count)]

    BashTask.partial(
        task_id="process", command='echo "processing $FILE (instance $RAFTSCHED_MAP_INDEX)"'
    ).expand(env=list_files())

    @task(retries=2)
    def measure(name: str, prefix: str) -> int:
        return len(prefix + name)

    @task
    def summarize(sizes: list) -> dict:
        return {"files": len(sizes), "bytes": sum(sizes)}

    summarize(measure.partial(prefix="s3://bucket/").expand(name=["a.csv", "bb.csv"]))


example_mapping()
