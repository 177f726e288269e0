"""TaskFlow: an ETL whose steps pass their return values (XCom), with a branch and a skip.

extract -> transform -> route (a branch) -> load_big | load_small -> report (the join). Each
return value reaches the next step as its argument; ``route`` follows one load and the other
is skipped; ``report`` runs after whichever load ran (``none_failed_min_one_success``).
``archive`` is a ``@task.bash`` that exits 99 on weekends: that ends it SKIPPED, not failed.
Manual runs only: ``raftsched dags trigger example_taskflow --conf '{"rows": 12}'``.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from raftsched import dag, task


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    tags=["example", "taskflow"],
    description="TaskFlow ETL: return values as arguments, a branch, a bash skip",
)
def example_taskflow():
    @task
    def extract() -> dict:
        rows = int(json.loads(os.environ.get("RAFTSCHED_CONF") or "{}").get("rows", 7))
        return {"rows": list(range(rows)), "source": "orders"}

    @task
    def transform(data: dict) -> dict:
        return {"count": len(data["rows"]), "total": sum(data["rows"]), "source": data["source"]}

    @task.branch
    def route(summary: dict) -> str:
        return "load_big" if summary["count"] > 10 else "load_small"

    @task
    def load_big(summary: dict) -> str:
        print(f"bulk-loading {summary['count']} rows of {summary['source']}")
        return "bulk"

    @task
    def load_small(summary: dict) -> str:
        print(f"loading {summary['count']} rows of {summary['source']} one by one")
        return "row-by-row"

    @task(trigger_rule="none_failed_min_one_success")
    def report(summary: dict) -> None:
        print(f"{summary['source']}: {summary['count']} rows, total {summary['total']}")

    @task.bash
    def archive(summary: dict) -> str:
        # exit 99 (skip_on_exit_code) on weekends: the attempt ends SKIPPED
        return f'[ "$(date +%u)" -ge 6 ] && exit 99; echo archiving {summary["count"]} rows'

    summary = transform(extract())
    loads = [load_big(summary), load_small(summary)]
    route(summary) >> loads
    loads >> report(summary)
    archive(summary)


example_taskflow()
