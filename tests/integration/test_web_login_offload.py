"""Logins cost the scheduler nodes no scrypt, and floods of them get 429 (web/auth.py,
web/login_limits.py, api/servicers/users.py).

- Through nginx to a real ``raftsched webserver`` (gunicorn) and three real nodes: anonymous
  logins (unknown names, a wrong password; each with an X-Forwarded-For of its own making)
  are answered 401 until the client's limit, then 429 with Retry-After and the message on
  the login page; no node checked a single password (``raftsched_password_checks_total`` on
  every node's /metrics stays 0, while a VerifyUser asked of a node does count).
- GetPasswordHash on a real node: the stored scrypt hash for an admin token, nothing for an
  unknown name, PERMISSION_DENIED for every other role.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import grpc
import pytest
from api_harness import ADMIN, OPERATOR, VIEWER, WORKER, ApiCluster
from harness import wait_for
from webstack import ADMIN_TOKEN, PASSWORD, USERNAME, HttpSession, WebStack, csrf_token

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import user_pb2, user_pb2_grpc
from raftsched.errors import ApiError

pytestmark = pytest.mark.slow

BURST = 6  # checked logins per client address, per process (one gunicorn worker here)
CHECKS = "raftsched_password_checks_total"


def _metric(admin_url: str, name: str) -> float:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} not in {admin_url}/metrics"
    return float(found.group(1))


def _login(web: HttpSession, username: str, password: str, spoofed: str) -> tuple[int, dict, str]:
    status, _, page = web.get("/login")
    assert status == 200
    fields = {"username": username, "password": password, "csrf_token": csrf_token(page)}
    request = urllib.request.Request(
        web.base_url + "/login",
        data=urllib.parse.urlencode(fields).encode(),
        method="POST",
        headers={"X-Forwarded-For": spoofed},  # the client's own claim: nginx appends the real
    )
    try:
        with web.opener.open(request, timeout=web.timeout) as resp:
            return resp.status, dict(resp.headers.items()), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers.items()), err.read().decode()


def test_anonymous_logins_cost_no_node_a_password_check_and_get_429(
    tmp_path: Path, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAFTSCHED_WEB_LOGIN_CLIENT_BURST", str(BURST))
    monkeypatch.setenv("RAFTSCHED_WEB_LOGIN_CLIENT_PER_MINUTE", "1")
    with WebStack(tmp_path, sqlite_url, webservers=1, web_workers=1) as stack:
        stack.start(worker=False)
        web = HttpSession(stack.url, follow=False)
        status, headers, _ = _login(web, USERNAME, PASSWORD, "198.51.100.1")
        assert status == 302, "the real user logs in"
        for i in range(BURST - 1):
            name, password = (USERNAME, "wrong password") if i == 0 else (f"nobody{i}", "guess")
            status, _, page = _login(web, name, password, f"203.0.113.{i}")
            assert status == 401 and "Invalid username or password." in page
        status, headers, page = _login(web, USERNAME, PASSWORD, "203.0.113.200")
        assert status == 429, page[:500]
        assert int(headers["Retry-After"]) >= 1
        assert "Too many login attempts from your address" in page and "Log in</h1>" in page
        nodes = stack.cluster.nodes
        assert [_metric(node.admin_url, CHECKS) for node in nodes] == [0.0] * len(nodes)
        # the counter counts: a VerifyUser asked of a node is one check there
        api = f"127.0.0.1:{nodes[0].port + 200}"
        with RaftschedClient([api], token=ADMIN_TOKEN) as client:
            request = user_pb2.VerifyUserRequest(username=USERNAME, password=PASSWORD)
            assert client.users.VerifyUser(request).ok
        assert _metric(nodes[0].admin_url, CHECKS) == 1.0


def test_password_hashes_go_to_admin_tokens_only(tmp_path: Path, sqlite_url: str) -> None:
    with ApiCluster(tmp_path, sqlite_url, nodes=1) as cluster:
        cluster.start()
        leading = lambda: (cluster.status(0) or {}).get("role") == "leader"  # noqa: E731
        wait_for(leading, timeout=60, what="a leader")
        admin = cluster.client(ADMIN)
        admin.users.CreateUser(
            user_pb2.CreateUserRequest(username="ada", password="correct horse", role="viewer")
        )
        ask = user_pb2.GetPasswordHashRequest(username="ada")
        answer = admin.users.GetPasswordHash(ask)
        assert answer.found and answer.role == "viewer"
        assert answer.password_hash.startswith("scrypt:")
        assert not admin.users.GetPasswordHash(
            user_pb2.GetPasswordHashRequest(username="nobody")
        ).found
        channel = grpc.insecure_channel(cluster.api_addresses[0])
        try:
            stub = user_pb2_grpc.UserServiceStub(channel)
            for token in (OPERATOR, VIEWER, WORKER):
                with pytest.raises(grpc.RpcError) as denied:
                    stub.GetPasswordHash(
                        ask, metadata=(("authorization", f"Bearer {token}"),), timeout=10
                    )
                assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
                assert "scrypt" not in (denied.value.details() or "")
        finally:
            channel.close()
        with pytest.raises(ApiError):
            cluster.client(None).users.GetPasswordHash(ask)
