"""The audit log in the web UI: the pages name the logged-in user on every audited call (the
cluster records "<user> via <webserver token>"), the Audit page and /api/v1/audit are for
admins only."""

from __future__ import annotations

from web_support import TOKEN, csrf_token, login

from raftsched.api.auth import caller_scope_of

WEB = f"admin token {caller_scope_of(TOKEN)}"  # the webserver's token, unnamed here


def test_a_pause_names_the_user_who_clicked(client, canned):
    login(client, "op")
    token = csrf_token(client, "/dags")
    response = client.post("/dags/etl_daily/pause", data={"paused": "1", "csrf_token": token})
    assert response.status_code in (200, 302)
    login(client, "admin")
    token = csrf_token(client, "/dags")
    client.post("/dags/etl_daily/pause", data={"paused": "0", "csrf_token": token})
    assert canned.actors == [f"op via {WEB}", f"admin via {WEB}"]


def test_the_audit_page_is_for_admins(client, canned):
    login(client, "op")
    assert client.get("/audit").status_code == 403
    assert "ListAuditRecords" not in [name for name, _ in canned.calls]
    login(client, "admin")
    page = client.get("/audit?actor=op&dag_id=etl_daily").get_data(as_text=True)
    assert "op via web" in page and "<code>pause</code>" in page and "etl_daily" in page
    [request] = [req for name, req in canned.calls if name == "ListAuditRecords"]
    assert (request.actor, request.dag_id) == ("op", "etl_daily")
    [record] = client.get("/audit.json").get_json()
    assert (record["id"], record["actor"], record["action"]) == (7, "op via web", "pause")


def test_the_rest_api_lists_records(client, canned):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = client.get("/api/v1/audit?actor=op&limit=5", headers=headers).get_json()
    assert [(r["id"], r["actor"], r["log_index"]) for r in body["records"]] == [
        (7, "op via web", 42)
    ]
    assert client.get("/api/v1/audit?limit=5000", headers=headers).status_code == 400
