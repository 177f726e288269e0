"""``build_server``: a gRPC server with raftsched's plumbing around the servicers given.

It adds the bearer-token interceptor (:mod:`raftsched.api.auth`), the standard
``grpc.health.v1.Health`` service, server reflection, TLS when ``[api] tls_cert`` is set, and
the ``[api] max_message_bytes`` limit. Servicers are instances of the generated
``*Servicer`` base classes; each is registered with its service by its type::

    server = build_server(config.api, [ClusterServicer(node), DagServicer(node, store)])
    server.start()             # health: SERVING for every service
    ...
    server.set_serving(False)  # e.g. while this node sees no leader
    server.stop(grace=5)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from raftsched.api import auth, tls
from raftsched.api.consistency import ConsistencyInterceptor, Gate
from raftsched.api.gen import (
    cluster_pb2,
    cluster_pb2_grpc,
    dag_pb2,
    dag_pb2_grpc,
    secret_pb2,
    secret_pb2_grpc,
    user_pb2,
    user_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from raftsched.api.servicers.decoding import DecodeErrorInterceptor
from raftsched.config import ApiConfig
from raftsched.errors import ConfigError

log = logging.getLogger(__name__)

# (servicer base class, registration function, full service name)
SERVICES: tuple[tuple[type, Any, str], ...] = (
    (
        cluster_pb2_grpc.ClusterServiceServicer,
        cluster_pb2_grpc.add_ClusterServiceServicer_to_server,
        cluster_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name,
    ),
    (
        dag_pb2_grpc.DagServiceServicer,
        dag_pb2_grpc.add_DagServiceServicer_to_server,
        dag_pb2.DESCRIPTOR.services_by_name["DagService"].full_name,
    ),
    (
        worker_pb2_grpc.WorkerServiceServicer,
        worker_pb2_grpc.add_WorkerServiceServicer_to_server,
        worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
    ),
    (
        user_pb2_grpc.UserServiceServicer,
        user_pb2_grpc.add_UserServiceServicer_to_server,
        user_pb2.DESCRIPTOR.services_by_name["UserService"].full_name,
    ),
    (
        secret_pb2_grpc.SecretServiceServicer,
        secret_pb2_grpc.add_SecretServiceServicer_to_server,
        secret_pb2.DESCRIPTOR.services_by_name["SecretService"].full_name,
    ),
)


def server_options(api: ApiConfig) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", api.max_message_bytes),
        ("grpc.max_send_message_length", api.max_message_bytes),
        # gRPC sets SO_REUSEPORT by default: a second server on a taken port would bind
        # silently and share its traffic. Fail instead.
        ("grpc.so_reuseport", 0),
        # Clients keep idle channels alive with pings (client.py): accept them.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ]


class ApiServer:
    """A built, not yet started server. ``port`` is the bound port (useful with port 0)."""

    def __init__(
        self, server: grpc.Server, port: int, host: str, services: list[str], secure: bool
    ) -> None:
        self.server = server
        self.port = port
        self.address = f"{host}:{port}"
        self.services = services
        self.secure = secure
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        self.set_serving(False)

    def start(self) -> None:
        self.server.start()
        self.set_serving(True)
        log.info(
            "gRPC API on %s (%s): %s",
            self.address,
            "TLS" if self.secure else "plaintext",
            ", ".join(self.services),
        )

    def set_serving(self, serving: bool) -> None:
        """Health status of the whole server ("") and of each service."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self.services):
            self.health.set(name, status)

    def stop(self, grace: float | None = 5.0) -> None:
        """Refuse new calls, let running ones finish for ``grace`` seconds, then cancel them."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()

    def wait(self, timeout: float | None = None) -> bool:
        return self.server.wait_for_termination(timeout)

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(grace=1.0)


def _interceptors(api: ApiConfig, gate: Gate | None) -> list[grpc.ServerInterceptor]:
    """Authentication first: a call that is refused never waits for the replica."""
    chain: list[grpc.ServerInterceptor] = [
        auth.AuthInterceptor(auth.TokenTable.from_config(api)),
        DecodeErrorInterceptor(),  # undecodable bytes: INVALID_ARGUMENT, not INTERNAL
    ]
    if gate is not None:
        chain.append(ConsistencyInterceptor(gate))
    return chain


def build_server(
    api: ApiConfig,
    servicers: Iterable[object],
    *,
    bind: str | None = None,
    max_workers: int = 64,
    gate: Gate | None = None,
) -> ApiServer:
    """A server for ``servicers`` on ``bind`` (default ``[api] grpc_bind``; port 0 picks one).

    ``max_workers`` bounds concurrent calls: each long-polling worker and each followed log
    holds a thread while it waits. ``gate`` (a node's ``ApiContext``) adds the consistency
    interceptor (:mod:`raftsched.api.consistency`): calls wait until this node applied what
    their caller has seen, and every answer carries its applied index. Raises ConfigError
    when there is no token and the bind is not loopback (see :mod:`raftsched.api.auth`), when
    a TLS file cannot be read, when a servicer is of no known service, or when the address
    cannot be bound.
    """
    bind = bind or api.grpc_bind
    auth.check_open_allowed(api, bind)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
        interceptors=_interceptors(api, gate),
        options=server_options(api),
    )
    services = []
    for servicer in servicers:
        for base, register, name in SERVICES:
            if isinstance(servicer, base):
                register(servicer, server)
                services.append(name)
                break
        else:
            raise ConfigError(
                f"{type(servicer).__name__} is not a servicer of"
                f" {', '.join(name for _, _, name in SERVICES)}"
            )
    reflection.enable_server_reflection(
        (*services, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    secure = api.tls_cert is not None and api.tls_key is not None
    try:
        if secure:
            port = server.add_secure_port(bind, tls.server_credentials(api.tls_cert, api.tls_key))
        else:
            port = server.add_insecure_port(bind)
    except RuntimeError as err:
        port, reason = 0, str(err)
    else:
        reason = ""
    if not port:
        raise ConfigError(
            f"[api] grpc_bind = {bind!r}: cannot listen there ({reason or 'bind failed'});"
            " is the port taken, or the host not one of this machine's addresses?",
            key="api.grpc_bind",
            value=bind,
        )
    host = bind.rsplit(":", 1)[0]
    return ApiServer(server, port, host, services, secure)
