"""The variables and connections pages: admins only, CSRF on every POST, and a value never in
any page, flash, log line or /metrics answer (every response body is grepped for it).

The webserver talks to a real gRPC server (the canned cluster's users, for logins) with a
SecretService that keeps what it is given in memory, so the test sees exactly what the web
sent and what it showed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from flask import Flask
from flask.testing import FlaskClient
from web_support import (
    CannedCluster,
    ClusterServicer,
    DagServicer,
    UserServicer,
    csrf_token,
    login,
    make_app,
)

from raftsched import secrets as sx
from raftsched.api.gen import secret_pb2, secret_pb2_grpc
from raftsched.api.server import build_server
from raftsched.config import default_config

VALUE = "s3cret-VALUE-7f3a9c"  # what must never come back
URI = f"postgresql://bob:{VALUE}@db.example:5432/app"
REFUSE = "refuse-me"  # a description the fake cluster refuses (INVALID_ARGUMENT)


class FakeSecrets(secret_pb2_grpc.SecretServiceServicer):
    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], tuple[str, str]] = {}
        self.dags: dict[tuple[str, str], list[str]] = {}  # the DAGs each may be read by

    def SetSecret(self, request: Any, context: Any) -> Any:
        if request.description == REFUSE:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "refused: the value is not valid")
        old = self.stored.get((request.kind, request.key))
        self.stored[(request.kind, request.key)] = (request.value, request.description)
        self.dags[(request.kind, request.key)] = list(request.dags)
        return secret_pb2.SetSecretResponse(changed=old != (request.value, request.description))

    def ListSecrets(self, request: Any, context: Any) -> Any:
        return secret_pb2.ListSecretsResponse(
            secrets=[
                secret_pb2.Secret(
                    kind=kind,
                    key=key,
                    description=description,
                    dags=self.dags.get((kind, key), []),
                )
                for (kind, key), (_, description) in sorted(self.stored.items())
                if kind == request.kind
            ]
        )

    def DeleteSecret(self, request: Any, context: Any) -> Any:
        if self.stored.pop((request.kind, request.key), None) is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no {request.kind} {request.key!r}")
        return secret_pb2.DeleteSecretResponse()


@pytest.fixture(scope="module")
def _cluster() -> Iterator[tuple[CannedCluster, FakeSecrets, str]]:
    import dataclasses

    from web_support import TOKEN

    canned, secrets = CannedCluster(), FakeSecrets()
    api = dataclasses.replace(default_config().api, admin_tokens=(TOKEN,))
    servicers = [ClusterServicer(canned), DagServicer(canned), UserServicer(canned), secrets]
    server = build_server(api, servicers, bind="127.0.0.1:0", max_workers=8)
    server.start()
    try:
        yield canned, secrets, server.address
    finally:
        server.stop(grace=0.5)


@pytest.fixture
def secrets(_cluster: tuple[CannedCluster, FakeSecrets, str]) -> FakeSecrets:
    _cluster[1].stored.clear()
    _cluster[1].dags.clear()
    return _cluster[1]


@pytest.fixture
def web(_cluster: tuple[CannedCluster, FakeSecrets, str]) -> Iterator[Flask]:
    app = make_app([_cluster[2]])
    yield app
    app.extensions["raftsched_gateway"].close()


@pytest.fixture
def admin(web: Flask, secrets: FakeSecrets) -> FlaskClient:
    client = web.test_client()
    login(client, "admin")
    return client


def _body(response: Any) -> str:
    text = response.get_data(as_text=True)
    assert VALUE not in text, f"the value is in the answer to {response.request.path}"
    return text


@pytest.mark.parametrize("user", ["op", "viewer"])
def test_only_admins_see_or_change_them(web: Flask, secrets: FakeSecrets, user: str) -> None:
    client = web.test_client()
    login(client, user)
    assert "/variables" not in client.get("/dags").get_data(as_text=True)  # no nav link
    token = csrf_token(client, "/dags")
    form = {"key": "API_KEY", "value": VALUE, "csrf_token": token}
    for section in ("variables", "connections"):
        assert client.get(f"/{section}").status_code == 403
        assert client.post(f"/{section}", data=form).status_code == 403
    secrets.stored[(sx.VARIABLE, "API_KEY")] = (VALUE, "")
    refused = client.post("/variables/API_KEY/delete", data={"csrf_token": token})
    assert refused.status_code == 403
    assert (sx.VARIABLE, "API_KEY") in secrets.stored
    assert client.get("/connections").status_code == 403


def test_posts_need_the_csrf_token(admin: FlaskClient, secrets: FakeSecrets) -> None:
    response = admin.post("/variables", data={"key": "API_KEY", "value": VALUE})
    assert response.status_code == 400
    _body(response)
    assert secrets.stored == {}
    secrets.stored[(sx.VARIABLE, "API_KEY")] = (VALUE, "")
    assert admin.post("/variables/API_KEY/delete").status_code == 400
    assert (sx.VARIABLE, "API_KEY") in secrets.stored


def test_set_list_delete_a_variable_without_ever_showing_it(
    admin: FlaskClient, secrets: FakeSecrets, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    page = _body(admin.get("/dags"))
    assert 'href="/variables"' in page and 'href="/connections"' in page  # admins' nav bar
    token = csrf_token(admin, "/variables")
    form = {"key": "API_KEY", "value": VALUE, "description": "the vendor's key"}
    saved = admin.post("/variables", data={**form, "csrf_token": token}, follow_redirects=True)
    assert saved.status_code == 200
    text = _body(saved)
    assert "Variable API_KEY saved." in text
    assert "API_KEY" in text and "the vendor&#39;s key" in text and sx.MASK in text
    assert secrets.stored[(sx.VARIABLE, "API_KEY")] == (VALUE, "the vendor's key")
    # a form that comes back with an error does not fill the value back in
    bad = admin.post("/variables", data={**form, "key": "1bad name", "csrf_token": token})
    assert bad.status_code == 400 and "expected a letter" in _body(bad)
    refused = admin.post("/variables", data={**form, "description": REFUSE, "csrf_token": token})
    assert refused.status_code == 400 and "refused: the value is not valid" in _body(refused)
    deleted = admin.post(
        "/variables/API_KEY/delete", data={"csrf_token": token}, follow_redirects=True
    )
    assert "Variable API_KEY deleted." in _body(deleted) and secrets.stored == {}
    again = admin.post(
        "/variables/API_KEY/delete", data={"csrf_token": token}, follow_redirects=True
    )
    assert "No variable API_KEY." in _body(again)
    _body(admin.get("/metrics"))
    assert VALUE not in caplog.text


def test_add_a_connection_without_ever_showing_its_uri(
    admin: FlaskClient, secrets: FakeSecrets, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = csrf_token(admin, "/connections")
    page = _body(admin.get("/connections"))
    assert "URI" in page and "None yet." in page
    saved = admin.post(
        "/connections",
        data={"key": "warehouse", "value": URI, "csrf_token": token},
        follow_redirects=True,
    )
    text = _body(saved)
    assert "Connection warehouse saved." in text and "db.example" not in text
    assert secrets.stored[(sx.CONNECTION, "warehouse")] == (URI, "")
    assert (sx.VARIABLE, "warehouse") not in secrets.stored
    assert "warehouse" not in _body(admin.get("/variables"))
    assert VALUE not in caplog.text


def test_a_variable_restricted_to_dags_says_which(admin: FlaskClient, secrets: FakeSecrets) -> None:
    token = csrf_token(admin, "/variables")
    form = {"key": "TEAM", "value": VALUE, "dags": "etl, reports ,", "csrf_token": token}
    text = _body(admin.post("/variables", data=form, follow_redirects=True))
    assert secrets.dags[(sx.VARIABLE, "TEAM")] == ["etl", "reports"]
    assert "<td>etl, reports</td>" in text
    form = {"key": "OPEN", "value": VALUE, "csrf_token": token}
    text = _body(admin.post("/variables", data=form, follow_redirects=True))
    assert secrets.dags[(sx.VARIABLE, "OPEN")] == [] and "every DAG" in text
