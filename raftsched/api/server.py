"""``build_server``: a gRPC server with raftsched's plumbing around the servicers given.

It adds the bearer-token interceptor (:mod:`raftsched.api.auth`), the standard
``grpc.health.v1.Health`` service, server reflection, TLS when ``[api] tls_cert`` is set, and
the ``[api] max_message_bytes`` limit.

Two thread pools. Short calls (heartbeats, outcomes, reads, writes) run on ``[api]
grpc_max_workers`` threads; the calls that wait for something to happen (:data:`LONG_POLLS`:
a worker's ``Lease`` and ``LeaseCallbacks`` wait up to 30 s for work, a followed log for its
task's end) run on ``[api] grpc_max_long_polls`` threads of their own. With one pool, 32 idle
workers (one Lease and one LeaseCallbacks each) filled 64 threads and a running attempt's
heartbeat queued behind them for seconds, past its fence window, so the worker killed a
healthy task. The split uses grpc's ``experimental_thread_pool`` attribute of a handler's
behaviour (grpc >= 1.58; ``tests/integration/test_api_poll_pool.py`` checks it is honoured).
A sleeping poll costs a thread's stack and no CPU; past ``grpc_max_long_polls`` a poll waits
for a free thread (never a short call's). Servicers are instances of the generated
``*Servicer`` base classes; each is registered with its service by its type::

    server = build_server(config.api, [ClusterServicer(node), DagServicer(node, store)])
    server.start()             # health: SERVING for every service
    ...
    server.set_serving(False)  # e.g. while this node sees no leader
    server.stop(grace=5)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from raftsched.api import auth, tls
from raftsched.api.consistency import ConsistencyInterceptor, Gate
from raftsched.api.gen import (
    asset_pb2,
    asset_pb2_grpc,
    cluster_pb2,
    cluster_pb2_grpc,
    dag_pb2,
    dag_pb2_grpc,
    pool_pb2,
    pool_pb2_grpc,
    secret_pb2,
    secret_pb2_grpc,
    user_pb2,
    user_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from raftsched.api.servicers.decoding import DecodeErrorInterceptor
from raftsched.api.wrap import Behaviour, with_behaviour
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
    (
        pool_pb2_grpc.PoolServiceServicer,
        pool_pb2_grpc.add_PoolServiceServicer_to_server,
        pool_pb2.DESCRIPTOR.services_by_name["PoolService"].full_name,
    ),
    (
        asset_pb2_grpc.AssetServiceServicer,
        asset_pb2_grpc.add_AssetServiceServicer_to_server,
        asset_pb2.DESCRIPTOR.services_by_name["AssetService"].full_name,
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
        self,
        server: grpc.Server,
        port: int,
        host: str,
        services: list[str],
        secure: bool,
        pools: tuple[futures.ThreadPoolExecutor, ...] = (),
    ) -> None:
        self.server = server
        self.pools = pools
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
        for pool in self.pools:  # grpc shuts down only the pool it was given
            pool.shutdown(wait=False, cancel_futures=True)

    def wait(self, timeout: float | None = None) -> bool:
        return self.server.wait_for_termination(timeout)

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(grace=1.0)


# Calls that wait for work or for a task's end: they run on the long-poll pool.
LONG_POLLS = frozenset(
    {
        "/raftsched.v1.WorkerService/Lease",
        "/raftsched.v1.WorkerService/LeaseCallbacks",
        "/raftsched.v1.WorkerService/LeaseTriggers",
        "/raftsched.v1.DagService/GetTaskLog",  # with follow, until the attempt ends
    }
)


class PollPoolInterceptor(grpc.ServerInterceptor):
    """Runs the :data:`LONG_POLLS` on ``pool`` instead of the server's own pool. First in the
    chain: it marks the behaviour every other interceptor wrapped, which is what grpc runs
    (denials of a long poll run there too). Thread-safe: it holds no mutable state."""

    def __init__(self, pool: futures.ThreadPoolExecutor, methods: frozenset[str]) -> None:
        self._pool = pool
        self._methods = methods

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method not in self._methods:
            return handler
        if handler.request_streaming:  # no raftsched call streams requests
            return handler
        return with_behaviour(handler, self._on_pool, self._on_pool)

    def _on_pool(self, behaviour: Behaviour) -> Behaviour:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            return behaviour(request, context)

        call.experimental_thread_pool = self._pool  # type: ignore[attr-defined]
        return call


def _interceptors(
    api: ApiConfig, gate: Gate | None, polls: futures.ThreadPoolExecutor
) -> list[grpc.ServerInterceptor]:
    """The long-poll pool's marker outermost; then authentication: a call that is refused
    never waits for the replica."""
    chain: list[grpc.ServerInterceptor] = [
        PollPoolInterceptor(polls, LONG_POLLS),
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
    max_workers: int | None = None,
    max_long_polls: int | None = None,
    gate: Gate | None = None,
) -> ApiServer:
    """A server for ``servicers`` on ``bind`` (default ``[api] grpc_bind``; port 0 picks one).

    ``max_workers`` (default ``[api] grpc_max_workers``) bounds the short calls running at
    once, ``max_long_polls`` (default ``[api] grpc_max_long_polls``) the long polls waiting at
    once (each holds a thread of its own pool while it waits). ``gate`` (a node's
    ``ApiContext``) adds the consistency interceptor (:mod:`raftsched.api.consistency`): calls
    wait until this node applied what their caller has seen, and every answer carries its
    applied index. Raises ConfigError
    when there is no token and the bind is not loopback (see :mod:`raftsched.api.auth`), when
    a TLS file cannot be read, when a servicer is of no known service, or when the address
    cannot be bound.
    """
    bind = bind or api.grpc_bind
    auth.check_open_allowed(api, bind)
    calls = futures.ThreadPoolExecutor(
        max_workers=max_workers or api.grpc_max_workers, thread_name_prefix="grpc"
    )
    polls = futures.ThreadPoolExecutor(
        max_workers=max_long_polls or api.grpc_max_long_polls, thread_name_prefix="grpc-poll"
    )
    server = grpc.server(
        calls, interceptors=_interceptors(api, gate, polls), options=server_options(api)
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
    return ApiServer(server, port, host, services, secure, (calls, polls))
