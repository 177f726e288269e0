"""A DAG with no schedule: it runs only when triggered (`raftsched dags trigger`)."""

from __future__ import annotations

from raftsched import DAG, BashTask

with DAG(
    "example_manual",
    schedule=None,
    tags=["example", "manual"],
    description="Runs only when someone triggers it",
):
    BashTask("say_hello", command='echo "hello from a manual run"')
