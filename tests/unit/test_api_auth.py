"""Bearer tokens and roles on a real gRPC server built by build_server, plus the standard
health and reflection services, open mode and TLS."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from raftsched.api import auth
from raftsched.api.client import RaftschedClient
from raftsched.api.gen import (
    asset_pb2,
    cluster_pb2,
    cluster_pb2_grpc,
    common_pb2,
    dag_pb2,
    dag_pb2_grpc,
    pool_pb2,
    secret_pb2,
    user_pb2,
    worker_pb2,
    worker_pb2_grpc,
)
from raftsched.api.server import ApiServer, build_server
from raftsched.config import ApiConfig, default_config
from raftsched.errors import ApiError, ConfigError

TOKENS = {"admin": "a-tok", "operator": "o-tok", "viewer": "v-tok", "worker": "w-tok"}


class Status(cluster_pb2_grpc.ClusterServiceServicer):
    def __init__(self, name: str) -> None:
        self.name = name

    def GetStatus(self, request, context):
        return cluster_pb2.GetStatusResponse(nodes=[cluster_pb2.NodeStatus(node_id=self.name)])


class Dags(dag_pb2_grpc.DagServiceServicer):
    def PauseDag(self, request, context):
        return dag_pb2.PauseDagResponse(changed=True)

    def ListDags(self, request, context):
        return dag_pb2.ListDagsResponse(freshness=common_pb2.Freshness(node_id="n1"))

    def GetTaskLog(self, request, context):
        yield common_pb2.LogChunk(seq=1, text="hello")


class Workers(worker_pb2_grpc.WorkerServiceServicer):
    def Lease(self, request, context):
        return worker_pb2.LeaseResponse()


def api_config(tmp_path, **changes) -> ApiConfig:
    return replace(default_config(tmp_path).api, grpc_bind="127.0.0.1:0", **changes)


@contextmanager
def serving(api: ApiConfig, *servicers) -> Iterator[ApiServer]:
    server = build_server(api, servicers, max_workers=8)
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=None)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tokens = {f"{role}_tokens": (token,) for role, token in TOKENS.items()}
    api = api_config(tmp_path_factory.mktemp("auth"), **tokens)
    with serving(api, Status("n1"), Dags(), Workers()) as srv:
        yield srv


def client_as(server, role: str | None, token: str | None = None) -> RaftschedClient:
    return RaftschedClient(server.address, token=token or TOKENS.get(role or ""), deadline=3)


def call(client: RaftschedClient, what: str):
    calls = {
        "GetStatus": lambda: client.cluster.GetStatus(cluster_pb2.GetStatusRequest()),
        "ListDags": lambda: client.dags.ListDags(dag_pb2.ListDagsRequest()),
        "PauseDag": lambda: client.dags.PauseDag(dag_pb2.PauseDagRequest(dag_id="etl")),
        "GetTaskLog": lambda: list(client.dags.GetTaskLog(dag_pb2.GetTaskLogRequest())),
        "Lease": lambda: client.workers.Lease(worker_pb2.LeaseRequest(worker_id="w")),
        "AddNode": lambda: client.cluster.AddNode(cluster_pb2.AddNodeRequest(address="h:1")),
    }
    with client:
        return calls[what]()


def denied(server, role, what, token=None) -> ApiError:
    with pytest.raises(ApiError) as err:
        call(client_as(server, role, token), what)
    return err.value


def test_no_token_is_unauthenticated_with_the_way_out(server):
    err = denied(server, None, "GetStatus")
    assert err.code is grpc.StatusCode.UNAUTHENTICATED
    assert "missing bearer token: pass --token or set RAFTSCHED_TOKEN" in err.message


def test_unknown_token_is_unauthenticated_and_not_echoed(server):
    err = denied(server, None, "ListDags", token="guess-me")
    assert err.code is grpc.StatusCode.UNAUTHENTICATED
    assert "unknown token" in err.message and "guess-me" not in err.message


def test_malformed_authorization_is_unauthenticated(server):
    channel = grpc.insecure_channel(server.address)
    stub = dag_pb2_grpc.DagServiceStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.ListDags(dag_pb2.ListDagsRequest(), metadata=[("authorization", "Basic v-tok")])
    channel.close()
    assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "Bearer <token>" in err.value.details()


def test_viewer_reads_but_may_not_write(server):
    assert call(client_as(server, "viewer"), "ListDags").freshness.node_id == "n1"
    assert [c.seq for c in call(client_as(server, "viewer"), "GetTaskLog")] == [1]
    err = denied(server, "viewer", "PauseDag")
    assert err.code is grpc.StatusCode.PERMISSION_DENIED
    assert "PauseDag needs role operator" in err.message and "has role viewer" in err.message


def test_operator_writes_but_may_not_change_the_cluster(server):
    assert call(client_as(server, "operator"), "PauseDag").changed
    err = denied(server, "operator", "AddNode")
    assert err.code is grpc.StatusCode.PERMISSION_DENIED and "admin" in err.message


def test_admin_may_call_everything(server):
    assert call(client_as(server, "admin"), "PauseDag").changed
    assert call(client_as(server, "admin"), "Lease") == worker_pb2.LeaseResponse()
    # AddNode is allowed, and then unimplemented by this test server.
    assert denied(server, "admin", "AddNode").code is grpc.StatusCode.UNIMPLEMENTED


def test_worker_token_only_reaches_the_worker_service(server):
    assert call(client_as(server, "worker"), "Lease") == worker_pb2.LeaseResponse()
    for what in ("ListDags", "GetStatus", "GetTaskLog"):
        err = denied(server, "worker", what)
        assert err.code is grpc.StatusCode.PERMISSION_DENIED, what
        assert "has role worker" in err.message
    assert denied(server, "viewer", "Lease").code is grpc.StatusCode.PERMISSION_DENIED


def test_health_needs_no_token(server):
    with grpc.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "raftsched.v1.DagService", "raftsched.v1.WorkerService"):
            answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=3)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, service


def test_reflection_needs_no_token_and_lists_the_services(server):
    with grpc.insecure_channel(server.address) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        services = set(db.get_services())
        assert {
            "raftsched.v1.ClusterService",
            "raftsched.v1.DagService",
            "raftsched.v1.WorkerService",
            "grpc.health.v1.Health",
        } <= services
        file = db.FindFileContainingSymbol("raftsched.v1.WorkerService")
        assert file.name == "raftsched/v1/worker.proto"


def test_every_rpc_has_a_role():
    from raftsched.api.server import SERVICES

    methods = set()
    for _, _, name in SERVICES:
        service = name.rpartition(".")[2]
        module = {
            "ClusterService": cluster_pb2,
            "DagService": dag_pb2,
            "UserService": user_pb2,
            "SecretService": secret_pb2,
            "WorkerService": worker_pb2,
            "PoolService": pool_pb2,
            "AssetService": asset_pb2,
        }[service]
        for method in module.DESCRIPTOR.services_by_name[service].methods:
            methods.add(f"/{name}/{method.name}")
    assert methods == set(auth.METHOD_ROLES)
    assert auth.required_role("/raftsched.v1.DagService/NotYetInTheTable") is auth.Role.ADMIN
    assert auth.required_role("/grpc.health.v1.Health/Check") is None


def test_role_lattice():
    r = auth.Role
    assert auth.allows(r.ADMIN, r.WORKER) and auth.allows(r.ADMIN, r.VIEWER)
    assert auth.allows(r.OPERATOR, r.VIEWER) and not auth.allows(r.VIEWER, r.OPERATOR)
    assert not auth.allows(r.WORKER, r.VIEWER) and not auth.allows(r.OPERATOR, r.WORKER)
    table = auth.TokenTable([("t1", r.VIEWER), ("t2", r.WORKER)])
    assert table.role_of("t2") is r.WORKER and table.role_of("t3") is None
    assert "t1" not in repr(table)


def test_loopback_server_without_tokens_runs_open(tmp_path, caplog):
    with serving(api_config(tmp_path), Status("open"), Dags()) as srv:
        assert call(client_as(srv, None), "PauseDag").changed
    assert "open to every local user" in caplog.text


def test_non_loopback_server_without_tokens_refuses_to_start(tmp_path):
    with pytest.raises(ConfigError, match=r"not a loopback address.*admin_tokens"):
        build_server(api_config(tmp_path), [Dags()], bind="0.0.0.0:0")


def test_taken_port_is_a_config_error(tmp_path, server):
    with pytest.raises(ConfigError, match="cannot listen"):
        build_server(api_config(tmp_path), [Dags()], bind=server.address)


def _self_signed(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raftsched-test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_tls_when_a_certificate_is_configured(tmp_path):
    cert, key = _self_signed(tmp_path)
    api = replace(api_config(tmp_path), tls_cert=cert, tls_key=key, viewer_tokens=("v-tok",))
    with serving(api, Status("tls")) as srv:
        assert srv.secure
        with RaftschedClient(srv.address, token="v-tok", tls_ca=cert, deadline=3) as client:
            answer = client.cluster.GetStatus(cluster_pb2.GetStatusRequest())
        assert answer.nodes[0].node_id == "tls"
        plaintext = RaftschedClient(srv.address, token="v-tok", deadline=0.5)
        with plaintext, pytest.raises(Exception):  # noqa: B017 - NoQuorumError or ApiError
            plaintext.cluster.GetStatus(cluster_pb2.GetStatusRequest())


def test_unreadable_tls_file_is_a_config_error(tmp_path):
    api = replace(api_config(tmp_path), tls_cert=tmp_path / "no.pem", tls_key=tmp_path / "no.key")
    with pytest.raises(ConfigError, match="tls_key"):
        build_server(api, [Dags()])


def test_request_ids_are_scoped_by_the_callers_token() -> None:
    """A caller that reuses another caller's request id never gets the other's result."""
    import grpc as _grpc

    from raftsched.api import auth as _auth

    seen: list[str] = []

    def behaviour(request: object, context: object) -> str:
        seen.append(_auth.caller_scope())
        return "ok"

    handler = _grpc.unary_unary_rpc_method_handler(behaviour)
    for token in ("alice-token", "bob-token", "alice-token"):
        _auth._as_caller(handler, _auth.caller_scope_of(token)).unary_unary(None, None)
    assert seen[0] == seen[2] != seen[1] and all(s.startswith("c") for s in seen)
    assert "alice" not in seen[0]  # the scope never shows the token
    assert _auth.caller_scope() == ""  # and it does not outlive the call in this thread

    def stream(request: object, context: object):  # type: ignore[no-untyped-def]
        yield _auth.caller_scope()

    streaming = _grpc.unary_stream_rpc_method_handler(stream)
    scope = _auth.caller_scope_of("carol-token")
    assert list(_auth._as_caller(streaming, scope).unary_stream(None, None)) == [scope]
    assert _auth.caller_scope() == ""
