"""The workers page, in a real browser, against a real cluster (and the same data through
`raftsched workers list` and ``GET /api/v1/workers``).

A worker started by the test runs a long task: the page lists it with its host, pid,
version, slots and the attempt (a link to its task page). Then the test kills that worker
(kill -9 of the PID it started): its task supervisor sees it die, reports the attempt and
signs it off, and the open page moves it to "lost", with why, by itself: the test never
reloads it after the kill (the page polls ``/workers.json`` from our own ``app.js``).
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from harness import wait_for
from webstack import PASSWORD, USERNAME, WebStack

from raftsched import __version__

pytestmark = pytest.mark.slow

SLOW_DAG = """
from raftsched import DAG, BashTask

with DAG("ui_slow", schedule=None):
    BashTask("sleep", command="sleep 600", retries=0)
"""


def _rows(page: Any, selector: str, *, reload: bool = True) -> dict[str, Any]:
    """The rows of a table by data-worker (after reloading the page, unless not ``reload``)."""
    if reload:
        page.reload()
    rows = page.locator(selector)
    return {rows.nth(i).get_attribute("data-worker"): rows.nth(i) for i in range(rows.count())}


def test_workers_page_lists_a_worker_and_then_why_it_was_lost(
    tmp_path: Path, sqlite_url: str, browser_context: Any, artifacts: Path
) -> None:
    with WebStack(tmp_path / "stack", sqlite_url, dags={"slow.py": SLOW_DAG}) as stack:
        stack.start(worker=True)
        assert stack.worker is not None and stack.worker.pid is not None
        pid = stack.worker.pid
        wait_for(  # 404 until the DAG file is parsed
            lambda: stack.rest("POST", "/dags/ui_slow/runs", {})[0] == 201,
            timeout=60,
            what="a run of ui_slow",
        )

        page = browser_context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(stack.url + "/workers")
        page.wait_for_url(re.compile(r"/login"))
        page.fill("#username", USERNAME)
        page.fill("#password", PASSWORD)
        page.click("button[type=submit]")
        page.goto(stack.url + "/workers")

        # Live, with the attempt it runs.
        live = wait_for(
            lambda: [
                row
                for row in _rows(page, "#workers tr.worker-row").values()
                if "ui_slow/sleep" in row.locator("td.running").inner_text()
            ],
            timeout=60,
            what="the worker, running ui_slow/sleep, on /workers",
        )
        row = live[0]
        worker_id = row.get_attribute("data-worker")
        cells = [row.locator("td").nth(i).inner_text() for i in range(6)]
        assert cells[1:4] == [socket.gethostname(), str(pid), __version__]
        assert cells[5] == "1/2"  # [worker] concurrency = 2
        link = row.locator("td.running a").first
        assert link.get_attribute("href").startswith("/dags/ui_slow/runs/")
        page.screenshot(path=str(artifacts / "workers.png"), full_page=True)

        # The same through the CLI and REST.
        listed = stack.cli("workers", "list", "--output", "json")
        assert listed.returncode == 0, listed.stderr
        [mine] = [w for w in json.loads(listed.stdout)["workers"] if w["worker_id"] == worker_id]
        assert mine["pid"] == pid and mine["slots_total"] == 2
        assert [r["task_id"] for r in mine["running"]] == ["sleep"]
        code, body = stack.rest("GET", "/workers")
        assert code == 200 and worker_id in [w["worker_id"] for w in body["workers"]]

        # kill -9 the worker the test started while the page is open: it moves to "lost",
        # with why, without a reload (a mark set in this page's window would not survive one).
        page.evaluate("window.notReloaded = true")
        assert page.locator("#workers-lost-section").is_hidden()
        stack.worker.kill()
        lost = wait_for(
            lambda: _rows(page, "#workers-lost tr.worker-lost-row", reload=False).get(worker_id),
            timeout=60,
            what="the killed worker listed as lost on the open /workers page",
        )
        assert page.evaluate("window.notReloaded") is True
        assert page.locator("#workers-lost-section").is_visible()
        reason = lost.locator("td.reason").inner_text()
        assert f"the worker process (pid {pid}) died" in reason, reason
        assert "reported 1 attempt(s) as failed" in reason, reason
        assert worker_id not in _rows(page, "#workers tr.worker-row", reload=False)
        assert "1 lost in the last 10 minutes" in page.locator("#workers-count").inner_text()
        page.screenshot(path=str(artifacts / "workers-lost.png"), full_page=True)
        assert not errors, f"JavaScript errors: {errors}"
