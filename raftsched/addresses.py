"""Where each scheduler node serves what, derived from its Raft address.

A node at Raft address ``host:port`` serves its loopback status endpoint at ``port + 100``
and its gRPC API at ``port + 200`` (127.0.0.1:7101 -> :7201 and :7301), unless the config
names them: ``[cluster] admin_bind`` and ``[api] grpc_bind``. With a bind set, every node
serves on that bind's port on its own Raft host (one config file serves all nodes), so a
client reaches node N at N's Raft host and the bind's port.

Used by the nodes themselves, the CLI, the worker and the webserver, so that all of them
agree; it needs nothing but the config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftsched.config import Config

ADMIN_PORT_OFFSET = 100
API_PORT_OFFSET = 200


def _host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host, int(port)


def _derive(raft_address: str, bind: str, offset: int) -> str:
    host, port = _host_port(raft_address)
    if bind:
        return f"{host}:{_host_port(bind)[1]}"
    return f"{host}:{port + offset}"


def api_address_for(raft_address: str, grpc_bind: str = "") -> str:
    """Where clients reach the gRPC API of the node at ``raft_address``."""
    return _derive(raft_address, grpc_bind, API_PORT_OFFSET)


def admin_address_for(raft_address: str, admin_bind: str = "") -> str:
    """Where the status endpoint of the node at ``raft_address`` listens."""
    return _derive(raft_address, admin_bind, ADMIN_PORT_OFFSET)


def cluster_api_addresses(config: Config) -> list[str]:
    """The gRPC address of every node of ``[cluster] nodes``."""
    return [api_address_for(node, config.api.grpc_bind) for node in config.cluster.nodes]
