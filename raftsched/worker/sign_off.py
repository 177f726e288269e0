"""What a worker tells the cluster about itself, for the workers page (docs/architecture.md §15).

- :func:`worker_info`: its host, pid, version and slots, sent with every Lease and Heartbeat
  (``GrpcWorkerTransport.info``).
- :func:`sign_off`: that it is gone, and why. The worker calls it when it stops (a signal, a
  rejection, an error); its task supervisor's death report (``_last_words``) calls it once it
  proved the worker dead. Best effort: a cluster that cannot be reached, or that does not
  know the call (an older release), notices the silence after ``LIVE_SECONDS`` instead.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from raftsched.api.client import RaftschedClient
from raftsched.api.gen import worker_pb2
from raftsched.errors import RaftschedError

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 500  # the server's bound (api/servicers/worker_roster.py)
SIGN_OFF_TIMEOUT = 3.0


def worker_info(slots: int, *, pid: int | None = None) -> Any:
    """This process's WorkerInfo."""
    from raftsched import __version__

    return worker_pb2.WorkerInfo(
        host=socket.gethostname()[:255],
        pid=os.getpid() if pid is None else pid,
        version=__version__,
        slots=max(0, int(slots)),
    )


def sign_off(client: RaftschedClient, worker_id: str, reason: str, info: Any = None) -> bool:
    """Tell the cluster ``worker_id`` is gone for ``reason``; False if nobody heard it."""
    request = worker_pb2.SignOffRequest(
        worker_id=worker_id, reason=reason[:MAX_REASON_CHARS], info=info
    )
    try:
        client.workers.SignOff(request, timeout=SIGN_OFF_TIMEOUT)
    except (RaftschedError, ValueError) as err:
        log.info("could not sign off worker %s (%s): %s", worker_id, reason, err)
        return False
    return True
