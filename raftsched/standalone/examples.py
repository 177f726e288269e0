"""The connection the example DAGs read, added once a new standalone cluster answers.

``example_connections`` (an example DAG) declares the connection ``example_web`` and fetches
the web UI's ``/health`` through it, so a first ``./scripts/run`` shows a connection at work:
its value travels encrypted through Raft and reaches only the task that declared it. The
connection is added only when it is missing, so a user's own value is never overwritten.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import grpc

from raftsched import retry
from raftsched.errors import RaftschedError

log = logging.getLogger(__name__)

EXAMPLE_CONNECTION = "example_web"
_DESCRIPTION = "the web UI of this standalone cluster (read by the example DAG example_connections)"


def seed_example_connection(
    apis: Sequence[str], web_url: str, *, timeout: float = 120.0
) -> threading.Thread:
    """Add ``example_web`` = ``web_url`` in the background once the cluster has a leader."""
    thread = threading.Thread(
        target=_seed, args=(list(apis), web_url, timeout), name="seed-example", daemon=True
    )
    thread.start()
    return thread


def _seed(apis: list[str], web_url: str, timeout: float) -> None:
    from raftsched.api.client import RaftschedClient
    from raftsched.api.gen import secret_pb2

    with RaftschedClient(apis, deadline=10.0) as client:

        def exists() -> bool:
            get = secret_pb2.GetSecretRequest(kind="connection", key=EXAMPLE_CONNECTION)
            try:
                client.secrets.GetSecret(get)
            except (RaftschedError, grpc.RpcError) as err:
                if getattr(err, "code", None) == grpc.StatusCode.NOT_FOUND:
                    return False
                raise
            return True

        try:  # every second while there is no leader yet, or the cluster is still starting
            there = retry.until(
                exists,
                deadline=timeout,
                every=1.0,
                retry_on=lambda err: isinstance(err, (RaftschedError, grpc.RpcError)),
            )
        except retry.GaveUp:
            log.warning("could not add the example connection %s: no answer", EXAMPLE_CONNECTION)
            return
        if there:
            return  # the user's own value wins
        try:
            client.secrets.SetSecret(
                secret_pb2.SetSecretRequest(
                    kind="connection",
                    key=EXAMPLE_CONNECTION,
                    value=web_url,
                    description=_DESCRIPTION,
                )
            )
        except (RaftschedError, grpc.RpcError) as err:
            log.warning("could not add the example connection %s: %s", EXAMPLE_CONNECTION, err)
