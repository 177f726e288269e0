"""A person's walk through the web UI, in a real browser, against a real cluster.

Three scheduler nodes, a worker, two webservers behind nginx (one webserver alone when nginx
is missing): log in, find the DAG, trigger it, watch its grid cells turn green, read a task's
log, look at the cluster, pause the DAG. Screenshots of the DAG list, the grid and the cluster
page go to test-artifacts/ at the repo root. JavaScript errors on any page fail the test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from webstack import PASSWORD, USERNAME, WebStack

pytestmark = pytest.mark.slow

DAG_ID = "ui_chain"
TASKS = ("extract", "transform", "load")
CHAIN_DAG = f"""
from raftsched import DAG, BashTask

with DAG("{DAG_ID}", schedule=None, tags=["ui"], description="three quick steps"):
    extract = BashTask("extract", command="echo extracted rows=42")
    transform = BashTask("transform", command="echo transformed")
    load = BashTask("load", command="echo loaded into the warehouse")
    extract >> transform >> load
"""


def rgb(css: str) -> tuple[int, ...]:
    match = re.match(r"rgba?\((\d+), (\d+), (\d+)", css)
    assert match, f"not a colour: {css!r}"
    return tuple(int(x) for x in match.groups())


def test_trigger_watch_read_log_and_pause(
    tmp_path: Path, sqlite_url: str, browser_context: Any, artifacts: Path
) -> None:
    with WebStack(tmp_path / "stack", sqlite_url, dags={"chain.py": CHAIN_DAG}) as stack:
        stack.start(worker=True)
        page = browser_context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))

        # Log in: any page sends a stranger to /login first.
        page.goto(stack.url + "/")
        page.wait_for_url(re.compile(r"/login"))
        page.fill("#username", USERNAME)
        page.fill("#password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_selector(f'#dag-list tr[data-dag="{DAG_ID}"]', timeout=60_000)
        assert "Log in" not in page.title()

        # The DAG page, then trigger a run from it.
        page.click(f'#dag-list tr[data-dag="{DAG_ID}"] a.dag-id')
        page.wait_for_selector("#grid")
        page.click("a.button.primary:has-text('Trigger')")
        page.wait_for_selector("#trigger-form")
        page.click("#trigger-form button[type=submit]")
        page.wait_for_url(re.compile(rf"/dags/{DAG_ID}/runs/"))

        # Watch the grid: it refreshes itself; every cell of the run turns green.
        page.goto(f"{stack.url}/dags/{DAG_ID}")
        page.wait_for_function(
            "n => document.querySelectorAll('#grid a.cell.state-success').length >= n",
            arg=len(TASKS),
            timeout=90_000,
            polling=500,
        )
        cells = page.locator("#grid a.cell.state-success")
        for i in range(cells.count()):
            red, green, blue = rgb(
                cells.nth(i).evaluate("c => getComputedStyle(c).backgroundColor")
            )
            assert green > red and green > blue, f"cell {i} is not green: {red, green, blue}"
        # The run's bar: green with its cells (grid.build reads the run with them)
        page.wait_for_selector("#grid .run-head .run-bar.state-success", timeout=30_000)
        assert page.locator("#grid .run-head .run-bar.state-success").count() == 1
        page.screenshot(path=str(artifacts / "grid.png"), full_page=True)

        # A task's log, as the worker shipped it.
        page.click("#grid a.cell.state-success[title^='extract']")
        page.wait_for_selector("#log")
        page.wait_for_function(
            "() => document.getElementById('log').textContent.includes('extracted rows=42')",
            timeout=30_000,
            polling=500,
        )
        assert "success" in page.locator("h1 .badge").inner_text()

        # The DAG list shows the finished run as a green mark.
        page.goto(stack.url + "/")
        row = page.locator(f'#dag-list tr[data-dag="{DAG_ID}"]')
        assert row.locator(".marks a.mark.state-success").count() == 1
        page.screenshot(path=str(artifacts / "dag-list.png"), full_page=True)

        # The cluster page: three nodes, one leader.
        page.goto(f"{stack.url}/cluster")
        page.wait_for_selector("#cluster tbody tr")
        assert page.locator("#cluster tbody tr").count() == 3
        assert page.locator("#cluster .badge.node-leader").count() == 1
        assert "leader: none" not in page.locator("#cluster-leader").inner_text()
        page.screenshot(path=str(artifacts / "cluster.png"), full_page=True)

        # Pause the DAG from its page; the cluster remembers it (the list reads it back).
        page.goto(f"{stack.url}/dags/{DAG_ID}")
        page.click(".page-head form button:has-text('Pause')")
        page.wait_for_selector("#paused-tag")
        page.goto(stack.url + "/?status=paused")
        toggle = page.locator(f'#dag-list tr[data-dag="{DAG_ID}"] button.toggle')
        assert toggle.get_attribute("aria-checked") == "false"
        shown = stack.cli("dags", "show", DAG_ID, "--output", "json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["dag"]["paused"] is True

        assert not errors, f"JavaScript errors: {errors}"
