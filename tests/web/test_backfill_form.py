"""The backfill form's guards (web/backfill.py): operators only, and a form that cannot be
read is shown again (400) without a call to the cluster. The dry run and the create against
a real cluster: tests/browser/test_charts_and_backfill.py."""

from __future__ import annotations

from web_support import csrf_token, login


def test_viewers_get_no_backfill_form(client):
    login(client, "viewer")
    assert client.get("/dags/etl_daily/backfill").status_code == 403
    assert b"backfill-link" not in client.get("/dags/etl_daily").data


def test_bad_dates_and_conf_are_form_errors(client, canned):
    login(client, "op")
    page = client.get("/dags/etl_daily/backfill")
    assert page.status_code == 200 and b'id="backfill-form"' in page.data
    token = csrf_token(client, "/dags/etl_daily/backfill")
    cases = [
        ({"start_date": "soon", "end_date": "2026-01-02T00:00:00Z"}, "ISO 8601"),
        ({"start_date": "2026-01-01T00:00:00Z", "end_date": ""}, "This field is required"),
        ({"start_date": "2026-01-01", "end_date": "2026-01-02", "conf": "[1]"}, "JSON object"),
    ]
    for fields, error in cases:
        response = client.post(
            "/dags/etl_daily/backfill", data={**fields, "action": "dry_run", "csrf_token": token}
        )
        assert response.status_code == 400 and error in response.get_data(as_text=True)
    assert not [c for c in canned.calls if c[0] == "BackfillDag"]


def test_the_form_needs_its_csrf_token(client, canned):
    login(client, "op")
    data = {"start_date": "2026-01-01", "end_date": "2026-01-02", "action": "create"}
    assert client.post("/dags/etl_daily/backfill", data=data).status_code == 400
    assert not [c for c in canned.calls if c[0] == "BackfillDag"]
