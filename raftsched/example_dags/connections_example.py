"""A connection at work: a task that declares one and reads it, its value kept secret.

``raftsched standalone`` adds the connection ``example_web`` (this cluster's web UI) on its
first start; elsewhere add it yourself: ``raftsched connections add example_web
http://127.0.0.1:8080``. Only a task that declares it (``connections=[...]``) receives it, as
``RAFTSCHED_CONN_EXAMPLE_WEB`` or through :func:`raftsched.secrets.get_connection`; its value
is masked in the task's log and never shown by the API or the UI.
Manual runs only: ``raftsched dags trigger example_connections``.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import datetime, timedelta

from raftsched import dag, task
from raftsched.secrets import get_connection


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    tags=["example", "connections"],
    description="Reads the connection example_web and checks the web UI's health through it",
)
def example_connections():
    @task(connections=["example_web"], retries=2, retry_delay=timedelta(seconds=15))
    def check_web() -> dict:
        web = get_connection("example_web")
        url = f"{web.conn_type}://{web.host}:{web.port}/health"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read().decode() or "{}")
        print(f"the web UI at {web.host}:{web.port} answered {response.status}")
        return {"status": response.status, "health": body}

    @task
    def report(health: dict) -> None:
        print(f"web UI health: {health}")

    report(check_web())


example_connections()
