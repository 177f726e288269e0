"""Logins are checked on the webserver and bounded there (web/auth.py, web/login_limits.py):
the cluster is asked for the stored hash only (never VerifyUser), an unknown name costs a
hash check like a known one, and too many attempts per client address or per user name get
HTTP 429 with Retry-After and a message on the login page."""

from __future__ import annotations

import dataclasses

import pytest
from raftsched.web import auth
from raftsched.web.login_limits import LoginGuard, TokenBuckets, client_key
from web_support import PASSWORDS, TOKEN, csrf_token, make_app
from werkzeug.security import generate_password_hash

from raftsched.api.gen import user_pb2_grpc
from raftsched.api.server import build_server
from raftsched.config import default_config
from raftsched.errors import LoginThrottled


@pytest.fixture
def limited(canned, _server):  # type: ignore[no-untyped-def]
    app = make_app(
        [_server[1]], LOGIN_CLIENT_BURST=3, LOGIN_CLIENT_PER_MINUTE=1, LOGIN_USER_BURST=2,
        LOGIN_USER_PER_MINUTE=1,
    )  # fmt: skip
    yield app
    app.extensions["raftsched_gateway"].close()


def _post(client, username: str, password: str, address: str = "192.0.2.1", **headers: str):  # type: ignore[no-untyped-def]
    token = csrf_token(client)
    return client.post(
        "/login",
        data={"username": username, "password": password, "csrf_token": token},
        environ_base={"REMOTE_ADDR": address},
        headers=headers,
    )


def test_the_webserver_checks_passwords_and_never_asks_the_cluster_to(client, canned):
    assert _post(client, "op", "wrong password").status_code == 401
    assert _post(client, "nobody", "some password").status_code == 401
    assert _post(client, "bad name!", "some password").status_code == 401
    response = _post(client, "op", PASSWORDS["op"])
    assert response.status_code == 302
    with client.session_transaction() as session:
        assert (session["user"], session["role"]) == ("op", "operator")
    assert canned.verified == 0  # not one VerifyUser: no scheduler node ran scrypt


def test_an_unknown_user_is_checked_against_a_hash_like_a_real_one(client, monkeypatch):
    checked: list[str] = []
    real = auth.check_password_hash

    def spy(stored: str, password: str) -> bool:
        checked.append(stored)
        return real(stored, password)

    monkeypatch.setattr(auth, "check_password_hash", spy)
    assert _post(client, "nobody", "some password").status_code == 401
    # the parameters of what the cluster stores (method$salt$hash): the same work
    (stored,) = checked
    assert stored.split("$")[0] == generate_password_hash("x").split("$")[0]


def test_too_many_logins_from_one_client_get_429_with_retry_after(limited):
    client = limited.test_client()
    for i in range(3):  # the burst, each a different name: no user is locked
        assert _post(client, f"user{i}", "wrong password").status_code == 401
    response = _post(client, "op", PASSWORDS["op"])
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) >= 1
    assert "Too many login attempts from your address" in response.get_data(as_text=True)
    # another client is not held back
    assert _post(client, "op", PASSWORDS["op"], address="192.0.2.2").status_code == 302


def test_failed_logins_lock_the_user_name_from_every_address(limited, canned):
    client = limited.test_client()
    assert _post(client, "viewer", "guess one", address="198.51.100.1").status_code == 401
    assert _post(client, "viewer", "guess two", address="198.51.100.2").status_code == 401
    # the right password, from a third address: the name is locked, nothing is checked
    response = _post(client, "viewer", PASSWORDS["viewer"], address="198.51.100.3")
    assert response.status_code == 429 and int(response.headers["Retry-After"]) >= 1
    assert "Too many failed logins for this user name" in response.get_data(as_text=True)
    # other names are not
    assert _post(client, "op", PASSWORDS["op"], address="198.51.100.4").status_code == 302


def test_forwarded_for_is_ignored_without_the_trusted_proxy(limited):
    # PROXY_FIX is off: X-Forwarded-For is the client's own claim and picks no bucket
    client = limited.test_client()
    for i in range(3):
        response = _post(client, f"user{i}", "wrong", **{"X-Forwarded-For": f"203.0.113.{i}"})
        assert response.status_code == 401
    response = _post(client, "user9", "wrong", **{"X-Forwarded-For": "203.0.113.99"})
    assert response.status_code == 429


def test_behind_the_proxy_its_forwarded_address_is_the_client(canned, _server):
    app = make_app([_server[1]], LOGIN_CLIENT_BURST=1, LOGIN_CLIENT_PER_MINUTE=1, PROXY_FIX=True)
    try:
        client = app.test_client()
        nginx = "127.0.0.1"  # every request comes from the proxy
        hop = {"X-Forwarded-For": "203.0.113.7"}
        assert _post(client, "user1", "wrong", address=nginx, **hop).status_code == 401
        assert _post(client, "user2", "wrong", address=nginx, **hop).status_code == 429
        other = {"X-Forwarded-For": "203.0.113.8"}
        assert _post(client, "user3", "wrong", address=nginx, **other).status_code == 401
    finally:
        app.extensions["raftsched_gateway"].close()


def test_token_buckets_refill_and_stay_bounded():
    now = [0.0]
    buckets = TokenBuckets(2, 60, max_keys=3, clock=lambda: now[0])  # 1 token a second
    assert buckets.take("a") == 0 and buckets.take("a") == 0
    assert buckets.take("a") == pytest.approx(1.0)
    assert buckets.wait("a") == pytest.approx(1.0)
    now[0] = 0.5
    assert buckets.take("a") == pytest.approx(0.5)
    now[0] = 1.0
    assert buckets.take("a") == 0
    for key in "bcde":
        buckets.take(key)
    assert len(buckets._buckets) == 3  # the least recently used left


def test_client_keys():
    assert client_key("192.0.2.1") == "192.0.2.1"
    assert client_key("::ffff:192.0.2.1") == "192.0.2.1"
    # one host can hold a whole /64: its addresses share a bucket
    assert client_key("2001:db8:1:2::1") == client_key("2001:db8:1:2:ffff::9")
    assert client_key("2001:db8:1:2::1") != client_key("2001:db8:1:3::1")
    assert client_key(None) == "unknown"


def test_a_cluster_older_than_the_webserver_is_named_not_asked_to_verify():
    class OldUsers(user_pb2_grpc.UserServiceServicer):
        """A node of the release before GetPasswordHash (every call UNIMPLEMENTED)."""

    api = dataclasses.replace(default_config().api, admin_tokens=(TOKEN,))
    server = build_server(api, [OldUsers()], bind="127.0.0.1:0", max_workers=2)
    server.start()
    app = make_app([server.address])
    try:
        response = _post(app.test_client(), "op", PASSWORDS["op"])
        assert response.status_code == 400
        assert "upgrade them first" in response.get_data(as_text=True)
    finally:
        app.extensions["raftsched_gateway"].close()
        server.stop(grace=0)


def test_past_the_check_slots_a_login_is_busy_not_queued_forever():
    guard = LoginGuard(
        client_burst=9, client_per_minute=9, user_burst=9, user_per_minute=9, concurrency=1,
        busy_wait=0.05,
    )  # fmt: skip
    # another login's scrypt is running
    with guard.checking(), pytest.raises(LoginThrottled) as busy, guard.checking():
        pass
    assert busy.value.scope == "busy" and busy.value.retry_after >= 1
    assert "busy checking other logins" in str(busy.value)
    with guard.checking():  # the slot is free again
        pass
