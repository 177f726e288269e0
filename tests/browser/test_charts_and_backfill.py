"""Issue #28's operator pages, in a real browser, against a real cluster and worker.

A weekday 06:00 cron DAG in Europe/Paris: the backfill form's dry run lists the three
slots of a range and creates nothing, then creates them; the runs complete on the worker.
The DAG page reads the schedule in words with its time zone and draws the run and task
duration charts (server-side SVG) for those runs; a run's page draws its Gantt, the
upstream task's bar ending before the downstream one's starts. Screenshots of each page go
to test-artifacts/. The code view shows the DAG file as a node read it, with the spec hash
the cluster holds; the cluster page draws a leadership handover on its timeline and each
node's apply lag. JavaScript errors on any page fail the test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from harness import wait_for
from webstack import PASSWORD, USERNAME, WebStack

pytestmark = pytest.mark.slow

DAG_ID = "ui_charts"
CRON_DAG = f"""
from datetime import datetime

from raftsched import DAG, BashTask

with DAG(
    "{DAG_ID}",
    schedule="0 6 * * 1-5",
    start_date=datetime(2026, 1, 1),
    timezone="Europe/Paris",
    catchup=False,
):
    extract = BashTask("extract", command="echo extracting; sleep 1")
    load = BashTask("load", command="echo loaded")
    extract >> load
"""
# Monday to Wednesday 2026-01-05..07, 06:00 in Paris (05:00 UTC): three slots.
FIRST, LAST = "2026-01-05T05:00:00Z", "2026-01-07T05:00:00Z"
SLOTS = ("2026-01-05 05:00:00", "2026-01-06 05:00:00", "2026-01-07 05:00:00")


def _backfill_runs(stack: WebStack) -> list[dict[str, Any]]:
    status, body = stack.rest("GET", f"/dags/{DAG_ID}/runs?page_size=50")
    assert status == 200, body
    return [r for r in body["runs"] if r["run_id"].startswith("backfill__")]


def test_backfill_form_charts_gantt_and_code(
    tmp_path: Path, sqlite_url: str, browser_context: Any, artifacts: Path
) -> None:
    with WebStack(
        tmp_path / "stack", sqlite_url, webservers=1, dags={"charts.py": CRON_DAG}
    ) as stack:
        stack.start(worker=True)
        wait_for(
            lambda: stack.rest("GET", f"/dags/{DAG_ID}")[0] == 200,
            timeout=60,
            what=f"{DAG_ID} parsed",
        )
        page = browser_context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(f"{stack.url}/dags/{DAG_ID}")
        page.wait_for_url(re.compile(r"/login"))
        page.fill("#username", USERNAME)
        page.fill("#password", PASSWORD)
        page.click("button[type=submit]")
        page.goto(f"{stack.url}/dags/{DAG_ID}")

        # The schedule in words beside the expression, with the DAG's time zone.
        assert page.locator("#schedule-words").inner_text() == "At 06:00, Monday through Friday"
        assert page.locator("#schedule-tz").inner_text() == "(Europe/Paris)"

        # Backfill: a range the cluster refuses is a form error, nothing created.
        page.click("#backfill-link")
        page.wait_for_selector("#backfill-form")
        page.fill("#start_date", LAST)
        page.fill("#end_date", FIRST)
        page.click("#backfill-dry-run")
        page.wait_for_selector("#backfill-form .form-error")
        assert page.locator("#backfill-preview").count() == 0

        # The dry run lists the three slots, creates nothing, and offers to create them.
        page.fill("#start_date", FIRST)
        page.fill("#end_date", LAST)
        page.click("#backfill-dry-run")
        page.wait_for_selector("#backfill-slots")
        rows = page.locator("#backfill-slots tbody tr")
        assert [rows.nth(i).locator("td").first.inner_text() for i in range(3)] == list(SLOTS)
        assert rows.count() == 3
        assert page.locator("#backfill-create").inner_text() == "Create 3 run(s)"
        page.screenshot(path=str(artifacts / "backfill-dry-run.png"), full_page=True)
        assert _backfill_runs(stack) == []

        page.click("#backfill-create")
        page.wait_for_url(re.compile(rf"/runs\?dag_id={DAG_ID}"))
        assert "3 run(s) created" in page.locator(".flash-success").inner_text()
        assert len(_backfill_runs(stack)) == 3

        done = wait_for(
            lambda: (
                runs
                if len(runs := [r for r in _backfill_runs(stack) if r["state"] == "success"]) == 3
                else None
            ),
            timeout=120,
            what="the three backfill runs succeed",
            interval=0.5,
        )

        # The DAG page's charts: one run-duration bar per finished run, a task row each.
        page.goto(f"{stack.url}/dags/{DAG_ID}")
        bars = page.locator("#run-duration-chart rect.bar.state-success")
        drawn = {bars.nth(i).get_attribute("data-run") for i in range(bars.count())}
        assert {r["run_id"] for r in done} <= drawn
        for task_id in ("extract", "load"):
            row = page.locator(f'#task-duration-chart g.chart-row[data-task="{task_id}"]')
            assert row.locator("rect.bar.state-success").count() >= 3, task_id
        page.locator("#charts").scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "dag-charts.png"), full_page=True)

        # One run's Gantt: extract's bar ends where load's may start, both green.
        run_id = sorted(r["run_id"] for r in done)[0]
        page.goto(f"{stack.url}/dags/{DAG_ID}/runs/{run_id}")
        page.wait_for_selector("#gantt")

        def box(task_id: str) -> dict[str, float]:
            bar = page.locator(f'#gantt g.gantt-row[data-task="{task_id}"] rect.state-success')
            assert bar.count() == 1, task_id
            return {k: float(bar.get_attribute(k)) for k in ("x", "width")}

        extract, load = box("extract"), box("load")
        assert extract["x"] + extract["width"] <= load["x"] + 1.0  # SVG units, rounded to 0.1
        page.screenshot(path=str(artifacts / "gantt.png"), full_page=True)

        # The code view: the file as parsed, from a node over gRPC, with the spec hash.
        page.goto(f"{stack.url}/dags/{DAG_ID}")
        page.click("#code-link")
        page.wait_for_selector("#code")
        lines = page.locator("#code .code-line")
        assert lines.count() == len(CRON_DAG.splitlines())
        assert 'schedule="0 6 * * 1-5",' in page.locator("#code").inner_text()
        shown = stack.cli("dags", "show", DAG_ID, "--output", "json")
        assert shown.returncode == 0, shown.stderr
        spec_hash = json.loads(shown.stdout)["dag"]["spec_hash"]
        assert page.locator("#code-spec-hash").get_attribute("title") == spec_hash
        assert page.locator("#code-spec-hash").inner_text() == spec_hash[:12]
        assert page.locator("#code-error, #code-changed, #code-truncated").count() == 0
        page.screenshot(path=str(artifacts / "dag-code.png"), full_page=True)
        status, body = stack.rest("GET", f"/dags/{DAG_ID}/source")
        assert status == 200 and body["source"] == CRON_DAG and body["spec_hash"] == spec_hash

        # The cluster page's history: a leadership handover is a leader change on every node's
        # row of the timeline and in the events; each node draws its apply lag.
        moved = stack.cli("cluster", "transfer-leader")
        assert moved.returncode == 0, moved.stderr

        def handed_over() -> bool:
            page.goto(f"{stack.url}/cluster")
            return page.locator("#history-timeline circle.event-leader_change").count() >= 3

        wait_for(handed_over, timeout=30, what="leader changes on /cluster", interval=0.5)
        assert page.locator("#history-timeline g.timeline-row").count() == 3
        assert page.locator('#history-events tr[data-kind="leader_change"]').count() >= 3
        assert page.locator(".node-chart svg.spark-lag polyline").count() >= 3
        assert page.locator("#history-membership-none").count() == 1
        page.locator("#cluster-history").scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts / "cluster-history.png"), full_page=True)
        status, body = stack.rest("GET", "/cluster/history")  # the same, in REST
        assert status == 200 and len(body["nodes"]) == 3
        for node in body["nodes"]:
            assert "leader_change" in [e["kind"] for e in node["events"]], node["node_id"]
            assert node["samples"] and "apply_lag" in node["samples"][0]

        assert not errors, f"JavaScript errors: {errors}"
