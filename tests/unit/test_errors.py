"""One error hierarchy: every raftsched error names its gRPC code, and one table maps it to
HTTP (raftsched.errors); api.status.status_of is the one mapping to gRPC."""

from __future__ import annotations

import grpc
import pytest
from raftsched.web.gateway import GatewayError, NotFound, Refused, Unavailable

from raftsched import errors
from raftsched.api.status import status_of
from raftsched.errors import (
    CommitTimeout,
    DagNotFound,
    LimitExceeded,
    MigrationRequired,
    NoQuorumError,
    OutboxFull,
    RaftschedError,
    StatusError,
    StoreUnavailable,
    http_status,
)


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def test_every_error_names_a_real_grpc_code_with_an_http_status() -> None:
    import raftsched.secrets
    import raftsched.store.materializer
    import raftsched.worker.transport  # noqa: F401

    classes = _subclasses(RaftschedError)
    assert len(classes) >= 15
    for cls in [RaftschedError, *classes]:
        assert cls.status in grpc.StatusCode.__members__, cls
        assert cls.status in errors.HTTP_STATUS or cls.status == "UNKNOWN", cls


@pytest.mark.parametrize(
    ("error", "code", "http"),
    [
        (DagNotFound("d"), grpc.StatusCode.NOT_FOUND, 404),
        (NoQuorumError("no quorum", reachable=1, total=3), grpc.StatusCode.UNAVAILABLE, 503),
        (CommitTimeout("r1", 5.0), grpc.StatusCode.DEADLINE_EXCEEDED, 504),
        (StoreUnavailable("down", url="sqlite:///x"), grpc.StatusCode.UNAVAILABLE, 503),
        (LimitExceeded("conf", "is too long"), grpc.StatusCode.INVALID_ARGUMENT, 400),
        (OutboxFull(10, 10), grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
        (MigrationRequired("run db migrate", current=None, head="abc"), None, 409),
        (
            StatusError(grpc.StatusCode.ALREADY_EXISTS, "exists"),
            grpc.StatusCode.ALREADY_EXISTS,
            409,
        ),
    ],
)
def test_one_mapping_to_grpc_and_one_to_http(
    error: RaftschedError, code: grpc.StatusCode | None, http: int
) -> None:
    got, message = status_of(error)
    assert got == (code or grpc.StatusCode.FAILED_PRECONDITION)
    assert message and "\n" not in message
    assert error.http_status == http == http_status(error.status)


def test_errors_carry_what_the_caller_acts_on() -> None:
    assert DagNotFound("etl").dag_id == "etl"
    quorum = NoQuorumError("no quorum", reachable=1, total=3)
    assert (quorum.reachable, quorum.total) == (1, 3)
    assert CommitTimeout("r1", 2.5).request_id == "r1"
    assert MigrationRequired("m", current="a", head="b").head == "b"
    assert StoreUnavailable("s", url="postgresql://h/db").url == "postgresql://h/db"


def test_gateway_errors_are_raftsched_errors_with_the_cluster_code() -> None:
    assert isinstance(Unavailable("x"), RaftschedError)
    assert Unavailable("x").http_status == 503
    assert NotFound("x").http_status == 404
    assert Refused("x", "INVALID_ARGUMENT").http_status == 400
    assert GatewayError("x", "PERMISSION_DENIED").http_status == 403
    assert status_of(ValueError("bad"))[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert status_of(KeyError("bug"))[0] == grpc.StatusCode.INTERNAL
