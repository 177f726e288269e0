"""Retries with exponential backoff, and a cleanup task that runs whatever happened upstream."""

from __future__ import annotations

from datetime import datetime, timedelta

from raftsched import DAG, BashTask

with DAG(
    "example_retries",
    schedule="*/5 * * * *",
    start_date=datetime(2024, 1, 1),
    default_retries=2,
    default_retry_delay=timedelta(seconds=5),
    tags=["example"],
    description="A flaky step retried with backoff; cleanup runs with trigger_rule all_done",
):
    prepare = BashTask("prepare", command="mkdir -p /tmp/raftsched-example && echo ready")
    flaky = BashTask(
        "flaky_call",
        # Fails in one second out of three: the retries get it through.
        command='if [ $(( $(date +%s) % 3 )) -ne 0 ]; then echo "call ok";'
        ' else echo "call failed"; exit 1; fi',
        retries=3,
        retry_exponential_backoff=True,
        max_retry_delay=timedelta(seconds=30),
        execution_timeout=timedelta(seconds=30),
    )
    cleanup = BashTask(
        "cleanup",
        command="rm -rf /tmp/raftsched-example && echo cleaned",
        trigger_rule="all_done",
        retries=0,
    )
    prepare >> flaky >> cleanup
