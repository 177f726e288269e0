"""Missing things and an unreachable cluster: a page that says so, never a traceback."""

from __future__ import annotations

from web_support import csrf_token, logged_in_session, login


def test_missing_dag_is_a_404_page(client):
    login(client, "viewer")
    for path in [
        "/dags/nope",
        "/dags/nope/grid.json",
        "/dags/etl_daily/runs/nope",
        "/dags/etl_daily/runs/scheduled__2024-01-01/tasks/nope",
        "/no/such/page",
    ]:
        response = client.get(path)
        assert response.status_code == 404, path
        assert b"Traceback" not in response.data
    page = client.get("/dags/nope").get_data(as_text=True)
    assert "Not found" in page and "nope" in page and "<nav>" in page  # a page of the site
    assert client.get("/dags/nope/grid.json").json["error"]


def test_operator_trigger_of_missing_dag_is_404(client):
    login(client, "op")
    assert client.get("/dags/nope/trigger").status_code == 404


def test_cluster_unreachable_shows_banner_not_500(down_client):
    logged_in_session(down_client, "op", "operator")
    for path in [
        "/dags",
        "/dags/etl_daily",
        "/runs",
        "/cluster",
        "/import-errors",
        "/dags/etl_daily/runs/r1",
    ]:
        response = down_client.get(path)
        assert response.status_code == 503, path
        text = response.get_data(as_text=True)
        assert "the scheduler cluster is unreachable: " in text
        assert 'id="cluster-banner"' in text and "op" in text  # the normal header, with a banner
    data = down_client.get("/cluster.json")
    assert data.status_code == 503 and "unreachable" in data.json["error"]


def test_login_when_cluster_unreachable(down_client):
    assert down_client.get("/login").status_code == 200
    token = csrf_token(down_client)
    response = down_client.post(
        "/login", data={"username": "a", "password": "b", "csrf_token": token}
    )
    assert response.status_code == 503
    assert b"the scheduler cluster is unreachable" in response.data


def test_health_ok(client, canned):
    response = client.get("/health")  # no login
    assert response.status_code == 200
    body = response.json
    assert body["status"] == "ok" and body["leader"] == "127.0.0.1:7101"
    assert len(body["nodes"]) == 3
    assert body["newest_heartbeat"] == "2024-01-01T00:00:02+00:00"
    (server,) = body["servers"]
    assert server["reachable"] is True and server["role"] == "leader"


def test_health_without_leader_is_503(client, canned):
    canned.leaderless = True
    response = client.get("/health")
    assert response.status_code == 503
    assert response.json["leader"] is None and response.json["status"] == "unavailable"


def test_health_cluster_unreachable_is_503(down_client):
    response = down_client.get("/health")
    assert response.status_code == 503
    body = response.json
    assert body["leader"] is None and body["error"]
    assert body["servers"][0]["reachable"] is False


def test_metrics(client, down_client):
    login(client, "viewer")
    client.get("/dags")
    client.get("/dags/nope")
    down_client.get("/health")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain")
    text = response.get_data(as_text=True)
    assert (
        'raftsched_web_requests_total{endpoint="dags.list_page",method="GET",status="200"}' in text
    )
    assert 'raftsched_web_request_seconds_bucket{endpoint="dags.detail"' in text
    assert 'raftsched_web_upstream_errors_total{code="NOT_FOUND",method="GetDag"}' in text
    assert 'raftsched_web_upstream_errors_total{code="UNAVAILABLE",method="GetStatus"}' in text
