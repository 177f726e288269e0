"""A scheduler node checks at most one password at a time (VerifyUser; the webserver checks its
logins itself with GetPasswordHash): a second caller waits ``CHECK_WAIT`` at most, then gets
RESOURCE_EXHAUSTED saying when to retry. A real server on loopback, a real metadata DB."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import grpc
import pytest
from sqlalchemy.engine import Engine

from raftsched.api.gen import user_pb2, user_pb2_grpc
from raftsched.api.server import build_server
from raftsched.api.servicers import users as user_rpcs
from raftsched.config import default_config
from raftsched.store import users


def test_a_node_checks_one_password_at_a_time(
    db_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(user_rpcs, "CHECK_WAIT", 0.1)
    users.create_user(db_engine, "ada", "correct horse", "viewer")
    servicer = user_rpcs.UserServicer(SimpleNamespace(require_engine=lambda: db_engine, node=None))  # type: ignore[arg-type]
    api = dataclasses.replace(default_config().api)
    server = build_server(api, [servicer], bind="127.0.0.1:0", max_workers=4)
    server.start()
    channel = grpc.insecure_channel(server.address)
    stub = user_pb2_grpc.UserServiceStub(channel)
    request = user_pb2.VerifyUserRequest(username="ada", password="correct horse")
    try:
        servicer._checking.acquire()  # another caller's check is running
        with pytest.raises(grpc.RpcError) as busy:
            stub.VerifyUser(request, timeout=30)
        assert busy.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "retry in 0.1s" in (busy.value.details() or "")
        servicer._checking.release()
        answer = stub.VerifyUser(request, timeout=30)
        assert answer.ok and answer.role == "viewer"
        assert servicer.checks._value.get() == 1  # the refused call checked nothing
    finally:
        channel.close()
        server.stop(grace=0)


def test_get_password_hash_answers_hostile_names_with_no_such_user(db_engine: Engine) -> None:
    users.create_user(db_engine, "ada", "correct horse", "operator")
    servicer = user_rpcs.UserServicer(SimpleNamespace(require_engine=lambda: db_engine, node=None))  # type: ignore[arg-type]
    server = build_server(default_config().api, [servicer], bind="127.0.0.1:0", max_workers=2)
    server.start()
    channel = grpc.insecure_channel(server.address)
    stub = user_pb2_grpc.UserServiceStub(channel)
    try:
        for name in ("", "a" * 10_000, "ada\x00", "ada\n", "ADA", "ad a"):
            answer = stub.GetPasswordHash(user_pb2.GetPasswordHashRequest(username=name))
            assert not answer.found and not answer.password_hash and not answer.role
        answer = stub.GetPasswordHash(user_pb2.GetPasswordHashRequest(username="ada"))
        assert answer.found and answer.role == "operator"
        assert answer.password_hash.startswith("scrypt:")
        assert servicer.checks._value.get() == 0  # reading a hash checks no password
    finally:
        channel.close()
        server.stop(grace=0)
