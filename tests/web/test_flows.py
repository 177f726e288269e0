"""Forms and live JSON endpoints: trigger with conf, clear and mark, paging, grid, logs."""

from __future__ import annotations

import json

from web_support import BULK, csrf_token, login

RUN = "/dags/etl_daily/runs/scheduled__2024-01-03"


def test_trigger_with_conf(client, canned):
    login(client, "op")
    token = csrf_token(client, "/dags/etl_daily/trigger")
    response = client.post(
        "/dags/etl_daily/trigger",
        data={
            "conf": '{"limit": 5}',
            "run_id": "my_run",
            "logical_date": "2024-02-01T06:00:00",
            "csrf_token": token,
        },
    )
    assert response.status_code == 302
    assert response.headers["Location"] == "/dags/etl_daily/runs/my_run"
    (request,) = [r for name, r in canned.calls if name == "TriggerDag"]
    assert json.loads(request.conf_json) == {"limit": 5}
    assert request.run_id == "my_run"
    assert request.logical_date.ToJsonString() == "2024-02-01T06:00:00Z"
    page = client.get("/dags/etl_daily/runs/my_run", follow_redirects=True)
    assert b"Triggered etl_daily" in page.data


def test_trigger_with_bad_conf_shows_the_form_again(client, canned):
    login(client, "op")
    token = csrf_token(client, "/dags/etl_daily/trigger")
    for conf, error in [("{not json", "not valid JSON"), ("[1, 2]", "expected a JSON object")]:
        response = client.post("/dags/etl_daily/trigger", data={"conf": conf, "csrf_token": token})
        assert response.status_code == 400
        text = response.get_data(as_text=True)
        assert error in text
        assert ('id="trigger-form"' in text and "{not json" in text) or "[1, 2]" in text
    bad_date = client.post(
        "/dags/etl_daily/trigger", data={"conf": "{}", "logical_date": "soon", "csrf_token": token}
    )
    assert bad_date.status_code == 400 and b"ISO 8601" in bad_date.data
    assert not [c for c in canned.calls if c[0] == "TriggerDag"]


def test_trigger_refused_by_cluster_is_shown_in_the_form(client, canned):
    login(client, "op")
    token = csrf_token(client, "/dags/etl_daily/trigger")
    data = {"conf": "{}", "run_id": "scheduled__2024-01-01", "csrf_token": token}
    response = client.post("/dags/etl_daily/trigger", data=data)
    assert response.status_code == 400
    assert b"already exists" in response.data and b'id="trigger-form"' in response.data


def test_clear_and_mark(client, canned):
    login(client, "op")
    token = csrf_token(client, RUN)
    response = client.post(
        RUN + "/act",
        data={"action": "clear", "task_id": ["transform"], "downstream": "1", "csrf_token": token},
        follow_redirects=True,
    )
    assert b"1 task(s) cleared: transform" in response.data
    (clear,) = [r for name, r in canned.calls if name == "ClearTasks"]
    assert list(clear.task_ids) == ["transform"] and clear.include_downstream
    client.post(RUN + "/act", data={"action": "mark_failed", "csrf_token": token})
    (mark,) = [r for name, r in canned.calls if name == "MarkTasks"]
    assert sorted(mark.task_ids) == ["extract", "load", "transform"]  # none selected: all
    assert mark.state == 5  # TASK_STATE_FAILED
    bad = client.post(RUN + "/act", data={"action": "explode", "csrf_token": token})
    assert bad.status_code == 400


def test_dag_list_search_filter_and_paging(client, canned):
    login(client, "viewer")
    first = client.get("/dags").get_data(as_text=True)
    assert f"{BULK + 2} matching" in first
    assert "bulk_000" in first and "bulk_049" in first and "bulk_050" not in first
    second = client.get("/dags?page_token=50&prev=").get_data(as_text=True)
    assert "bulk_050" in second and "Previous" in second
    paused = client.get("/dags?status=paused&search=_dag").get_data(as_text=True)
    assert "paused_dag" in paused
    assert "0 matching" in client.get("/dags?status=paused&search=etl").get_data(as_text=True)
    assert "1 matching" in client.get("/dags?status=active&search=etl").get_data(as_text=True)
    found = client.get("/dags?search=ETL").get_data(as_text=True)
    assert "1 matching" in found and "etl_daily" in found


def test_dag_list_json(client):
    login(client, "viewer")
    data = client.get("/dags.json?search=etl").json
    (dag,) = data["dags"]
    assert dag["dag_id"] == "etl_daily" and dag["paused"] is False
    assert [r["state"] for r in dag["recent_runs"]] == ["running", "failed", "success"]
    assert dag["next_run"]["logical_date"] == "2024-01-05T00:00:00+00:00"


def test_dag_page_grid_and_graph(client):
    login(client, "viewer")
    page = client.get("/dags/etl_daily").get_data(as_text=True)
    assert page.count('class="cell state-') == 9
    assert "state-upstream_failed" in page and "state-failed" in page
    assert page.count('class="node state-') == 3 and page.count('class="edge"') == 2
    assert "/dags/etl_daily/runs/scheduled__2024-01-02/tasks/transform" in page
    grid = client.get("/dags/etl_daily/grid.json").json
    assert [r["run_id"] for r in grid["runs"]][-1] == "scheduled__2024-01-03"  # newest right
    assert grid["tasks"] == ["extract", "transform", "load"]  # dependency order
    assert grid["cells"]["load"][1] == {"state": "upstream_failed", "try_number": 1}
    assert grid["latest"] == {"extract": "success", "transform": "running", "load": "none"}


def test_run_page_and_state_json(client):
    login(client, "viewer")
    page = client.get("/dags/etl_daily/runs/scheduled__2024-01-02").get_data(as_text=True)
    assert "exit code 2" in page and "2/2" not in page and "1/2" in page
    data = client.get("/dags/etl_daily/runs/scheduled__2024-01-02/state.json").json
    assert data["run"]["state"] == "failed"
    assert {t["task_id"]: t["state"] for t in data["task_instances"]}["load"] == "upstream_failed"


def test_log_json_follows_with_after_seq(client, canned):
    login(client, "viewer")
    url = RUN + "/tasks/transform/log.json"
    first = client.get(url).json
    assert [c["seq"] for c in first["chunks"]] == [1, 2, 3]
    assert first["chunks"][1] == {"seq": 2, "stream": "stderr", "text": "warning: slow input\n"}
    assert first["last_seq"] == 3 and first["done"] is False  # transform is running
    canned.logs.append(("stdout", "row 2000 of 5000\n"))
    second = client.get(url + "?after_seq=3").json
    assert [c["text"] for c in second["chunks"]] == ["row 2000 of 5000\n"]
    assert second["last_seq"] == 4
    (request,) = [r for name, r in canned.calls if name == "GetTaskLog" and r.after_seq == 3]
    assert request.follow is False
    finished = client.get("/dags/etl_daily/runs/scheduled__2024-01-01/tasks/load/log.json").json
    assert finished["done"] is True


def test_import_errors_and_cluster(client, canned):
    login(client, "viewer")
    page = client.get("/import-errors").get_data(as_text=True)
    assert "/dags/broken.py" in page and "SyntaxError" in page
    cluster = client.get("/cluster").get_data(as_text=True)
    assert "leader: 127.0.0.1:7101" in cluster and "4242" in cluster
    data = client.get("/cluster.json").json
    assert data["leader"] == "127.0.0.1:7101"
    node = data["nodes"][0]
    assert node["role"] == "leader" and node["term"] == 7 and node["commit_index"] == 420
    assert node["db_watermark"] == 4242 and node["outbox_backlog"] == 3
    assert data["nodes"][1]["db_watermark"] is None


def test_json_endpoints_need_login(client):
    assert client.get("/cluster.json").status_code == 401
    assert client.get("/dags.json").status_code == 401
