"""Fixtures of the web tests: the Flask test client against a real gRPC server (canned data).

``canned``      the data the cluster answers with (reset before each test)
``app``         create_app() pointed at the canned server, with the webserver's admin token
``client``      its test client (web_support.login(client, "op") logs in as admin|op|viewer)
``down_client`` a test client whose cluster address has no server at all
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient
from web_support import CannedCluster, free_port, make_app, start_server


@pytest.fixture(scope="session")
def _server() -> Iterator[tuple[CannedCluster, str]]:
    canned = CannedCluster()
    server = start_server(canned)
    try:
        yield canned, server.address
    finally:
        server.stop(grace=0.5)


@pytest.fixture
def canned(_server: tuple[CannedCluster, str]) -> CannedCluster:
    _server[0].reset()
    return _server[0]


@pytest.fixture
def app(canned: CannedCluster, _server: tuple[CannedCluster, str]) -> Iterator[Flask]:
    app = make_app([_server[1]])
    yield app
    app.extensions["raftsched_gateway"].close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def down_app() -> Iterator[Flask]:
    app = make_app(
        [f"127.0.0.1:{free_port()}"], RAFTSCHED_DEADLINE=0.5, RAFTSCHED_HEALTH_TIMEOUT=0.5
    )
    yield app
    app.extensions["raftsched_gateway"].close()


@pytest.fixture
def down_client(down_app: Flask) -> FlaskClient:
    return down_app.test_client()
