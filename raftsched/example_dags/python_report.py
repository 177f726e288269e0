"""Python tasks: a hourly report built by plain functions of this file."""

from __future__ import annotations

from datetime import datetime

from raftsched import DAG, PythonTask


def fetch_metrics(source: str, limit: int) -> None:
    print(f"fetched {limit} metrics from {source}")


def summarize(percentile: float) -> None:
    print(f"p{percentile:g} latency: 120 ms")


with DAG(
    "example_python_report",
    schedule="@hourly",
    start_date=datetime(2024, 1, 1),
    timezone="Europe/Berlin",
    tags=["example", "python"],
    description="Fetch metrics and summarize them with Python functions",
):
    fetch = PythonTask("fetch", fn=fetch_metrics, kwargs={"source": "api", "limit": 100})
    report = PythonTask("summarize", fn=summarize, kwargs={"percentile": 99})
    fetch >> report
