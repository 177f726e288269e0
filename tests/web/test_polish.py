"""The UI's rough edges, kept smooth: manual-only schedules, the Tasks table's order, the
grid's run headers, the cluster page's DB watermark."""

from __future__ import annotations

import re

from raftsched.web import graph
from raftsched.web.grid import run_label
from web_support import login


def test_manual_only_schedule(client):
    login(client, "viewer")
    page = client.get("/dags/paused_dag").get_data(as_text=True)
    assert "manual only" in page
    assert "None (UTC)" not in page and "(UTC)</dd>" not in page.split("<dt>Schedule</dt>")[1][:200]
    listing = client.get("/dags?search=paused_dag").get_data(as_text=True)
    row = listing.split('data-dag="paused_dag"')[1].split("</tr>")[0]
    assert "manual only" in row and "<code>None</code>" not in row
    scheduled = client.get("/dags/etl_daily").get_data(as_text=True)
    assert "<code>@daily</code>" in scheduled and "manual only" not in scheduled
    # In words (cron-descriptor, from the expanded "0 0 * * *"), then the DAG's time zone
    assert '<span id="schedule-words">At 00:00</span>' in scheduled
    assert '<span class="muted" id="schedule-tz">(UTC)</span>' in scheduled


def test_tasks_table_in_dependency_order(client):
    login(client, "viewer")
    page = client.get("/dags/etl_daily").get_data(as_text=True)
    table = page.split("<h2>Tasks</h2>")[1]
    order = re.findall(r"<tr><td>(\w+)</td>", table)
    assert order == ["extract", "transform", "load"]


def test_topological_ties_by_task_id():
    tasks = [
        {"task_id": "z_end", "upstream": ["b", "a"]},
        {"task_id": "b", "upstream": ["root"]},
        {"task_id": "a", "upstream": ["root"]},
        {"task_id": "c_alone", "upstream": []},
        {"task_id": "root", "upstream": []},
    ]
    assert [t["task_id"] for t in graph.topological(tasks)] == [
        "c_alone",
        "root",
        "a",
        "b",
        "z_end",
    ]


def test_grid_run_headers(client):
    login(client, "viewer")
    page = client.get("/dags/etl_daily").get_data(as_text=True)
    head = page.split('<table class="grid"')[1].split("</thead>")[0]
    assert "Task ↓" in head and "logical date (UTC)" in head
    labels = re.findall(r'<span class="run-label">([^<]*)</span>', head)
    assert labels == ["01-01 00:00:00", "01-02 00:00:00", "01-03 00:00:00"]
    assert 'title="scheduled__2024-01-03 · running · 2024-01-03 00:00:00 UTC"' in head
    assert 'scope="row">extract</th>' in page
    assert 'id="grid-empty" hidden' in page
    data = client.get("/dags/etl_daily/grid.json").json
    assert [r["label"] for r in data["runs"]] == labels
    empty = client.get("/dags/paused_dag").get_data(as_text=True)
    assert '<p class="muted" id="grid-empty">No runs yet.</p>' in empty


def test_run_label_without_logical_date():
    assert run_label({"run_id": "manual__x", "logical_date": None}) == "manual__x"
    assert run_label({"run_id": "manual__2024-01-01T00:00:00", "logical_date": None}) == (
        "manual__2024-…"
    )


def test_cluster_watermark_in_header(client, canned):
    login(client, "viewer")
    page = client.get("/cluster").get_data(as_text=True)
    assert "DB watermark 4242, outbox backlog 3" in page
    rows = page.split("<tbody>")[1].split("</tr>")
    assert "<td>4242</td>" in rows[0]
    assert "<td></td>" in rows[1] and "<td>—</td>" not in rows[1]  # followers: no dash
    data = client.get("/cluster.json").json
    assert data["db_watermark"] == 4242 and data["outbox_backlog"] == 3
    assert data["watermark_per_node"] is True
    canned.leaderless = True
    page = client.get("/cluster").get_data(as_text=True)
    assert "DB watermark unknown, outbox backlog 3" in page
    assert "DB watermark</th>" not in page


def test_run_page_dates_say_utc_once(client):
    login(client, "viewer")
    page = client.get("/dags/etl_daily/runs/scheduled__2024-01-03").get_data(as_text=True)
    assert "<dt>Logical date (UTC)</dt><dd>2024-01-03 00:00:00</dd>" in page
    assert "<dt>Started (UTC)</dt><dd>—</dd>" in page and "— UTC" not in page


def test_small_text_is_not_padded_like_a_button(client):
    css = client.get("/static/style.css").get_data(as_text=True)
    assert "\n.small { padding" not in css and "button.small, .button.small { padding" in css
