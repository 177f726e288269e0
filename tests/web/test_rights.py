"""Who may do what: viewer reads, operator also triggers, pauses, clears and marks; admin also
manages users. Every form needs its CSRF token."""

from __future__ import annotations

import pytest
from web_support import csrf_token, login

RUN = "/dags/etl_daily/runs/scheduled__2024-01-02"


def _posts(token: str) -> list[tuple[str, dict]]:
    return [
        ("/dags/etl_daily/pause", {"paused": "1", "csrf_token": token}),
        ("/dags/etl_daily/trigger", {"conf": "{}", "csrf_token": token}),
        (RUN + "/act", {"action": "clear", "task_id": "transform", "csrf_token": token}),
        (RUN + "/act", {"action": "mark_success", "task_id": "load", "csrf_token": token}),
    ]


def test_viewer_reads_but_cannot_change(client, canned):
    login(client, "viewer")
    assert client.get("/dags/etl_daily").status_code == 200
    page = client.get("/dags?search=etl").get_data(as_text=True)
    assert "Trigger" not in page  # no buttons it may not use
    token = csrf_token(client, "/dags")
    for path, data in _posts(token):
        assert client.post(path, data=data).status_code == 403, path
    assert client.get("/dags/etl_daily/trigger").status_code == 403
    response = client.post(
        "/dags/etl_daily/paused.json", json={"paused": True}, headers={"X-CSRFToken": token}
    )
    assert response.status_code == 403
    assert client.get("/users").status_code == 403
    names = [name for name, _ in canned.calls]
    assert not {"Pause", "TriggerDag", "ClearTasks", "MarkTasks"} & set(names)


def test_operator_changes_dags_and_runs(client, canned):
    login(client, "op")
    token = csrf_token(client, "/dags")
    for path, data in _posts(token):
        response = client.post(path, data=data)
        assert response.status_code == 302, (path, response.get_data(as_text=True)[:500])
    names = [name for name, _ in canned.calls]
    assert {"Pause", "TriggerDag", "ClearTasks", "MarkTasks"} <= set(names)
    assert canned.paused["etl_daily"] is True
    assert client.get("/users").status_code == 403


def test_admin_manages_users(client, canned):
    login(client, "admin")
    page = client.get("/users")
    assert page.status_code == 200 and b"viewer" in page.data
    token = csrf_token(client, "/users")
    created = client.post(
        "/users",
        data={
            "username": "newbie",
            "password": "long-enough",
            "role": "operator",
            "csrf_token": token,
        },
    )
    assert created.status_code == 302
    assert canned.users["newbie"][0] == "operator"
    again = client.post(
        "/users",
        data={
            "username": "newbie",
            "password": "long-enough",
            "role": "viewer",
            "csrf_token": token,
        },
    )
    assert again.status_code == 400 and b"exists" in again.data  # the cluster's refusal, shown
    short = client.post(
        "/users", data={"username": "x", "password": "short", "role": "viewer", "csrf_token": token}
    )
    assert short.status_code == 400 and b"at least 8 characters" in short.data
    deleted = client.post("/users/newbie/delete", data={"csrf_token": token})
    assert deleted.status_code == 302 and "newbie" not in canned.users
    itself = client.post("/users/admin/delete", data={"csrf_token": token}, follow_redirects=True)
    assert b"cannot delete yourself" in itself.data and "admin" in canned.users


def test_deleted_user_is_logged_out(client, canned):
    login(client, "viewer")
    assert client.get("/dags").status_code == 200
    del canned.users["viewer"]
    assert client.get("/dags").status_code == 302


def test_role_change_applies_to_live_session(client, canned):
    login(client, "viewer")
    _, digest, created = canned.users["viewer"]
    canned.users["viewer"] = ("operator", digest, created)
    assert client.get("/dags/etl_daily/trigger").status_code == 200


@pytest.mark.parametrize(
    "path,data",
    [
        ("/dags/etl_daily/pause", {"paused": "1"}),
        ("/dags/etl_daily/trigger", {"conf": "{}"}),
        (RUN + "/act", {"action": "clear"}),
        ("/users", {"username": "x", "password": "long-enough", "role": "viewer"}),
        ("/logout", {}),
    ],
)
def test_post_without_csrf_token_is_refused(client, canned, path, data):
    login(client, "admin")
    response = client.post(path, data=data)
    assert response.status_code == 400
    assert b"CSRF" in response.data
    assert not [
        c for c in canned.calls if c[0] in ("Pause", "TriggerDag", "ClearTasks", "CreateUser")
    ]


def test_login_without_csrf_token_is_refused(client):
    response = client.post("/login", data={"username": "admin", "password": "admin-pass-1"})
    assert response.status_code == 400


def test_json_post_takes_csrf_token_in_header(client, canned):
    login(client, "op")
    url = "/dags/etl_daily/paused.json"
    assert client.post(url, json={"paused": True}).status_code == 400  # no header
    token = csrf_token(client, "/dags")
    response = client.post(url, json={"paused": True}, headers={"X-CSRFToken": token})
    assert response.status_code == 200
    assert response.json == {"dag_id": "etl_daily", "paused": True, "changed": True}
    bad = client.post(url, json={"paused": "yes"}, headers={"X-CSRFToken": token})
    assert bad.status_code == 400


def test_bad_login_does_not_say_which_part(client):
    wrong_password = login(client, "admin", "nope")
    unknown_user = login(client, "nobody", "nope")
    assert wrong_password.status_code == unknown_user.status_code == 401
    assert b"Invalid username or password." in wrong_password.data
    assert b"Invalid username or password." in unknown_user.data
    assert client.get("/dags").status_code == 302


def test_login_redirects_only_to_local_paths(client):
    token = csrf_token(client)
    data = {"username": "viewer", "password": "viewer-pass", "csrf_token": token}
    response = client.post("/login", data={**data, "next": "https://evil.example/x"})
    assert response.headers["Location"] == "/dags"
    client.post("/logout", data={"csrf_token": csrf_token(client, "/dags")})
    token = csrf_token(client)
    response = client.post("/login", data={**data, "csrf_token": token, "next": "/cluster"})
    assert response.headers["Location"] == "/cluster"


def test_session_cookie_flags(client):
    response = login(client, "viewer")
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie


def test_logout(client):
    login(client, "viewer")
    response = client.post("/logout", data={"csrf_token": csrf_token(client, "/dags")})
    assert response.status_code == 302
    assert client.get("/dags").status_code == 302
