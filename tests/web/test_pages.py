"""Every page renders for a logged-in user, against the canned cluster over gRPC."""

from __future__ import annotations

from web_support import csrf_token, login


def test_login_page_and_redirect_when_anonymous(client):
    response = client.get("/dags")
    assert response.status_code == 302
    assert "/login?next=/dags" in response.headers["Location"]
    page = client.get("/login")
    assert page.status_code == 200
    assert b'name="csrf_token"' in page.data


def test_login_and_header(client):
    response = login(client, "op")
    assert response.status_code == 302
    page = client.get("/dags?search=etl")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "op" in text and "operator" in text
    assert "etl_daily" in text


def test_pages_render(client):
    login(client, "admin")
    for path in [
        "/dags",
        "/dags?search=etl",
        "/dags?status=paused",
        "/dags/etl_daily",
        "/dags/etl_daily/trigger",
        "/runs",
        "/runs?dag_id=etl_daily&state=failed",
        "/dags/etl_daily/runs/scheduled__2024-01-02",
        "/dags/etl_daily/runs/scheduled__2024-01-03/tasks/transform",
        "/import-errors",
        "/cluster",
        "/users",
    ]:
        response = client.get(path)
        assert response.status_code == 200, (path, response.get_data(as_text=True)[:2000])
    assert csrf_token(client, "/dags")
