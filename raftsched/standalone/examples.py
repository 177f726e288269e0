"""The connection the example DAGs read, added once a new standalone cluster answers.

``example_connections`` (an example DAG) declares the connection ``example_web`` and fetches
the web UI's ``/health`` through it, so a first ``./scripts/run`` shows a connection at work:
its value travels encrypted through Raft and reaches only the task that declared it. The
connection is added only when it is missing, so a user's own value is never overwritten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import grpc

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

    deadline = time.monotonic() + timeout
    with RaftschedClient(apis, deadline=10.0) as client:
        while time.monotonic() < deadline:
            try:
                get = secret_pb2.GetSecretRequest(kind="connection", key=EXAMPLE_CONNECTION)
                client.secrets.GetSecret(get)
                return  # there already: the user's own value wins
            except (RaftschedError, grpc.RpcError) as err:
                if getattr(err, "code", None) == grpc.StatusCode.NOT_FOUND:
                    break
                time.sleep(1.0)  # no leader yet, or the cluster is still starting
        else:
            log.warning("could not add the example connection %s: no answer", EXAMPLE_CONNECTION)
            return
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
