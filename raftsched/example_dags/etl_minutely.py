"""A small ETL on a one-minute cron: extract two sources in parallel, transform, load."""

from __future__ import annotations

from datetime import datetime, timedelta

from raftsched import DAG, BashTask

with DAG(
    "example_etl",
    schedule="* * * * *",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=2,
    tags=["example", "etl"],
    description="Extract two sources, transform, load: every minute",
):
    extract_orders = BashTask(
        "extract_orders",
        command='echo "extracting orders"; sleep 1; echo "42 orders"',
        execution_timeout=timedelta(minutes=1),
    )
    extract_customers = BashTask(
        "extract_customers",
        command='echo "extracting customers"; sleep 1; echo "7 customers"',
        execution_timeout=timedelta(minutes=1),
    )
    transform = BashTask("transform", command='echo "joining orders and customers"')
    load = BashTask(
        "load",
        command='echo "loading into $TARGET"',
        env={"TARGET": "warehouse.orders_daily"},
        priority_weight=10,
        # Only workers serving this queue lease it: `raftsched worker --queues default` (the
        # default of both). queue="warehouse" would wait for `raftsched worker --queues
        # warehouse`, its task page saying "waiting: no live worker serves queue 'warehouse'".
        queue="default",
    )

    [extract_orders, extract_customers] >> transform >> load
