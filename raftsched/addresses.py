"""Where each scheduler node serves what, derived from its Raft address.

A node at Raft address ``host:port`` serves its loopback status endpoint at ``port + 100``
and its gRPC API at ``port + 200`` (127.0.0.1:7101 -> :7201 and :7301), unless the config
names them: ``[cluster] admin_bind`` and ``[api] grpc_bind``. A node *binds* a configured
address as written (a wildcard host like 0.0.0.0 included); since one config file serves all
nodes, a client *dials* node N at N's Raft host and the bind's port.

Used by the nodes themselves, the CLI, the worker and the webserver, so that all of them
agree; it needs nothing but the config.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftsched.config import Config

ADMIN_PORT_OFFSET = 100
API_PORT_OFFSET = 200


def is_loopback(address: str) -> bool:
    """Whether ``host:port`` (port 0 allowed, ``[v6]:port``) names a loopback host:
    ``localhost`` in any case, or a loopback IP. False for anything else; never raises."""
    host = address.rsplit(":", 1)[0].strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    """Where clients reach the status endpoint of the node at ``raft_address``."""
    return _derive(raft_address, admin_bind, ADMIN_PORT_OFFSET)


def api_bind_for(raft_address: str, grpc_bind: str = "") -> str:
    """What the node at ``raft_address`` binds its gRPC server to."""
    return grpc_bind or api_address_for(raft_address)


def admin_bind_for(raft_address: str, admin_bind: str = "") -> str:
    """What the node at ``raft_address`` binds its status endpoint to."""
    return admin_bind or admin_address_for(raft_address)


def cluster_api_addresses(config: Config) -> list[str]:
    """The gRPC address of every node of ``[cluster] nodes``."""
    return [api_address_for(node, config.api.grpc_bind) for node in config.cluster.nodes]
