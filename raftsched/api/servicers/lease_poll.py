"""The long poll of the work that is not a task: callback jobs (``LeaseCallbacks``) and
triggers (``LeaseTriggers``).

The replica is checked every :data:`POLL_INTERVAL` for something leasable, and a lease is
proposed only when it holds one, so an idle poller puts nothing in the log. The first proposal
always goes out, and so does the next after a duplicate: a client retrying the call
(failover) replays the proposals it may have made, and gets back grants whose answer it lost
instead of leaving them to expire.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc

from raftsched.api.status import raise_for_result
from raftsched.cluster.proposer import new_request_id

POLL_INTERVAL = 0.25


def poll_for_grants(
    ctx: Any,
    signal: Any,
    context: grpc.ServicerContext,
    *,
    name: str,
    wait: float,
    request_id: str,
    command_for: Callable[[str], Any],
    any_leasable: Callable[[], bool],
) -> tuple[Any, ...]:
    """The grants of the first proposal (``command_for(request id)``) that leased something,
    or () once ``wait`` (bounded by the call's deadline) passed, the server closes or the
    client left. A refusal raises as the call's status (``name`` says which call)."""
    remaining = context.time_remaining()
    if remaining is not None:
        wait = min(wait, max(0.0, remaining - 1.0))
    end = time.monotonic() + wait
    base = request_id or new_request_id()
    attempt = 0
    replay = True
    while True:
        if replay or any_leasable():
            result = ctx.propose(command_for(f"{base}#{attempt}"), context)
            attempt += 1
            raise_for_result(result, detail=f"{name} refused ({result.reason})")
            grants = tuple(result.value or ())
            if grants:
                return grants
            replay = bool(result.duplicate)
            if replay:
                continue
        left = end - time.monotonic()
        if left <= 0 or signal.closed or not context.is_active():
            return ()
        time.sleep(min(POLL_INTERVAL, left))
