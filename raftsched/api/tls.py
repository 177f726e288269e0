"""TLS credentials for the gRPC server and its clients, from PEM files.

Server: ``[api] tls_cert`` + ``tls_key`` turn TLS on. Clients are not asked for certificates
(bearer tokens authenticate them); ``[api] tls_ca`` is what *clients* use to verify the
server (``--tls-ca``), e.g. a private CA. A client given no CA but connecting with TLS uses
the system's roots.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from raftsched.errors import ConfigError


def read_pem(path: Path | str, key: str) -> bytes:
    """The file's bytes; ConfigError naming ``key`` when it cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(
            f"{key} = {str(path)!r}: cannot read: {err.strerror or err}", key=key
        ) from None
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{key} = {str(path)!r}: not a PEM file (no -----BEGIN line)", key=key)
    return data


def server_credentials(cert: Path | str, key: Path | str) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(read_pem(key, "[api] tls_key"), read_pem(cert, "[api] tls_cert"))]
    )


def channel_credentials(ca: Path | str | None = None) -> grpc.ChannelCredentials:
    roots = read_pem(ca, "tls_ca") if ca is not None else None
    return grpc.ssl_channel_credentials(root_certificates=roots)
