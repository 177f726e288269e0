"""The pools page: everyone logged in sees the pools, an operator (or admin) sets and deletes
them with the CSRF token, a viewer cannot. The webserver talks to a real gRPC server with a
PoolService that keeps what it is given in memory (the live cluster's: test_queues_e2e.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from flask import Flask
from web_support import (
    TOKEN,
    CannedCluster,
    ClusterServicer,
    DagServicer,
    UserServicer,
    csrf_token,
    login,
    make_app,
)

from raftsched.api.gen import pool_pb2, pool_pb2_grpc
from raftsched.api.server import build_server
from raftsched.config import default_config


class FakePools(pool_pb2_grpc.PoolServiceServicer):
    def __init__(self) -> None:
        self.stored: dict[str, tuple[int, str]] = {}

    def ListPools(self, request: Any, context: Any) -> Any:
        pools = [pool_pb2.Pool(name="default_pool", slots=-1, running_slots=3)]
        pools += [
            pool_pb2.Pool(name=name, slots=slots, description=text, queued_tasks=1)
            for name, (slots, text) in sorted(self.stored.items())
        ]
        for pool in pools[1:]:
            pool.updated_at.GetCurrentTime()
        return pool_pb2.ListPoolsResponse(pools=pools)

    def SetPool(self, request: Any, context: Any) -> Any:
        old = self.stored.get(request.name)
        self.stored[request.name] = (request.slots, request.description)
        return pool_pb2.SetPoolResponse(changed=old != (request.slots, request.description))

    def DeletePool(self, request: Any, context: Any) -> Any:
        if self.stored.pop(request.name, None) is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no pool {request.name!r}")
        return pool_pb2.DeletePoolResponse()


@pytest.fixture(scope="module")
def _cluster() -> Iterator[tuple[FakePools, str]]:
    canned, pools = CannedCluster(), FakePools()
    api = dataclasses.replace(default_config().api, admin_tokens=(TOKEN,))
    servicers = [ClusterServicer(canned), DagServicer(canned), UserServicer(canned), pools]
    server = build_server(api, servicers, bind="127.0.0.1:0", max_workers=8)
    server.start()
    try:
        yield pools, server.address
    finally:
        server.stop(grace=0.5)


@pytest.fixture
def pools(_cluster: tuple[FakePools, str]) -> FakePools:
    _cluster[0].stored.clear()
    return _cluster[0]


@pytest.fixture
def web(_cluster: tuple[FakePools, str]) -> Iterator[Flask]:
    app = make_app([_cluster[1]])
    yield app
    app.extensions["raftsched_gateway"].close()


def test_a_viewer_sees_the_pools_and_cannot_change_them(web: Flask, pools: FakePools) -> None:
    pools.stored["etl"] = (4, "warehouse")
    client = web.test_client()
    login(client, "viewer")
    page = client.get("/pools").get_data(as_text=True)
    assert 'href="/pools"' in page  # in the nav bar
    assert 'data-pool="default_pool"' in page and "unlimited" in page
    assert 'data-pool="etl"' in page and "warehouse" in page
    assert 'id="pool-form"' not in page and "Delete" not in page
    token = csrf_token(client, "/pools")
    form = {"name": "etl", "slots": "1", "csrf_token": token}
    assert client.post("/pools", data=form).status_code == 403
    assert client.post("/pools/etl/delete", data={"csrf_token": token}).status_code == 403
    assert pools.stored == {"etl": (4, "warehouse")}
    assert client.get("/pools.json").get_json()["pools"][1]["slots"] == 4


def test_an_operator_sets_and_deletes_a_pool_with_the_csrf_token(
    web: Flask, pools: FakePools
) -> None:
    client = web.test_client()
    login(client, "op")
    assert client.post("/pools", data={"name": "etl", "slots": "2"}).status_code == 400
    assert pools.stored == {}
    token = csrf_token(client, "/pools")
    bad = client.post("/pools", data={"name": "no spaces", "slots": "2", "csrf_token": token})
    assert bad.status_code == 400 and pools.stored == {}
    form = {"name": "etl", "slots": "2", "description": "loads", "csrf_token": token}
    saved = client.post("/pools", data=form)
    assert saved.status_code == 302 and pools.stored == {"etl": (2, "loads")}
    assert "Pool etl saved." in client.get("/pools").get_data(as_text=True)
    assert client.post("/pools/etl/delete", data={"csrf_token": token}).status_code == 302
    assert pools.stored == {}
    client.post("/pools/etl/delete", data={"csrf_token": token})
    assert "No pool etl." in client.get("/pools").get_data(as_text=True)


def test_the_dag_page_and_the_rest_api_show_each_task_pool(web: Flask) -> None:
    client = web.test_client()
    login(client, "viewer")
    page = client.get("/dags/etl_daily").get_data(as_text=True)
    assert "<th>Pool (slots)</th>" in page
    assert '<a href="/pools">warehouse</a> (2)' in page  # load takes 2 slots of warehouse
    assert '<a href="/pools">default_pool</a></td>' in page  # a task naming none
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = client.get("/api/v1/dags/etl_daily", headers=headers).get_json()
    tasks = {t["task_id"]: (t["pool"], t["pool_slots"]) for t in body["tasks"]}
    assert tasks == {
        "extract": ("default_pool", 1),
        "load": ("warehouse", 2),
        "transform": ("default_pool", 1),
    }
